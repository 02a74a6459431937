//! Fingerprinting of large or encoded bodies off the async worker threads.
//!
//! Decoding and canonicalizing a body can take milliseconds per megabyte, and a small gzip
//! body may inflate a thousandfold up to the decoded-body limit. Such work runs on tokio's
//! blocking pool, at most one job per CPU at a time (a FIFO semaphore), and at most one per
//! principal (its *lane*): one caller's flood of bombs queues in its own lane and holds one
//! slot, so other callers' encoded bodies get the other slots, and small identity bodies are
//! fingerprinted inline and never wait. (A caller that can name many principals, e.g. by
//! varying an unverified `Authorization` header, can still fill every slot; the per-principal
//! limits and a verified principal source bound that.)

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use bytes::Bytes;
use http::header::{CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, HeaderName, Method, Uri};
use idemgate_core::fingerprint::{FingerprintError, FingerprintInput, FingerprintOptions};
use idemgate_core::Fingerprint;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::policy::RoutePolicy;
use crate::rejection::IdempotencyRejection;

/// Identity bodies up to this size, in bytes, are fingerprinted inline.
const INLINE_BYTES: usize = 64 << 10;

/// What a fingerprint reads of a request, owned so it can move to a blocking thread.
#[derive(Debug)]
pub(crate) struct FingerprintJob {
    pub(crate) method: Method,
    pub(crate) uri: Uri,
    pub(crate) headers: HeaderMap,
    pub(crate) route: String,
    pub(crate) policy: Arc<RoutePolicy>,
    pub(crate) body: Bytes,
    /// The caller, whose heavy jobs run one at a time.
    pub(crate) principal: String,
}

impl FingerprintJob {
    /// The request's fingerprint by algorithm `version`.
    ///
    /// Version 1 decodes up to 8 × `max_body_bytes`, as the releases that wrote it did, so its
    /// digest is unchanged; version 2 up to the route's decoded-body limit. From version 2 on,
    /// a `Content-Type` or `Content-Encoding` sent more than once or not in visible ASCII is
    /// also hashed as received, header by header: upstreams read such requests in more than
    /// one way.
    ///
    /// # Errors
    /// [`FingerprintError::DecodedTooLarge`] past the decoded-body limit (version 2), and
    /// [`FingerprintError::UnknownVersion`].
    fn compute(&self, version: u16) -> Result<Fingerprint, FingerprintError> {
        let (rp, headers) = (&self.policy, &self.headers);
        let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
        let all = |name| {
            headers
                .get_all(name)
                .iter()
                .map(move |v| (name, v.as_bytes()))
        };
        let named = rp.fingerprint_headers.iter().map(HeaderName::as_str);
        let mut extra: Vec<(&str, &[u8])> = named.flat_map(all).collect();
        if version >= 2 {
            for name in ["content-type", "content-encoding"] {
                let values = headers.get_all(name);
                if values.iter().count() > 1 || values.iter().any(|v| v.to_str().is_err()) {
                    extra.extend(all(name));
                }
            }
        }
        let input = FingerprintInput {
            method: self.method.as_str(),
            route: &self.route,
            path: self.uri.path(),
            query: self.uri.query(),
            content_type: header(CONTENT_TYPE),
            content_encoding: header(CONTENT_ENCODING),
            headers: &extra,
            body: &self.body,
        };
        let opts = FingerprintOptions {
            ignore_json_pointers: &rp.ignore_json_pointers,
            max_decoded_bytes: match version {
                1 => rp.max_body_bytes.saturating_mul(8),
                _ => rp.decoded_body_limit(),
            },
        };
        Fingerprint::compute_version(version, &input, &opts)
    }

    /// Whether the work may be large: an encoded body, or one over [`INLINE_BYTES`].
    fn heavy(&self) -> bool {
        self.body.len() > INLINE_BYTES || self.headers.contains_key(CONTENT_ENCODING)
    }

    /// The fingerprint by algorithm `version`, computed inline or on the blocking pool.
    ///
    /// # Errors
    /// [`IdempotencyRejection::DecodedBodyTooLarge`] past the route's decoded-body limit;
    /// [`IdempotencyRejection::Internal`] for an unknown version or a failed blocking task.
    ///
    /// # Cancel safety
    /// Dropping the future while the job runs lets the job finish on its thread (holding
    /// its slot), then discards the result.
    pub(crate) async fn run(
        self: Arc<Self>,
        version: u16,
    ) -> Result<Fingerprint, IdempotencyRejection> {
        let result = if self.heavy() {
            let lane = LANES.enter(&self.principal).await;
            let slots = BLOCKING_SLOTS.clone();
            let Ok(permit) = slots.acquire_owned().await else {
                return Err(IdempotencyRejection::Internal); // never closed
            };
            let job = tokio::task::spawn_blocking(move || {
                let _held = (lane, permit);
                self.compute(version)
            });
            job.await.map_err(|_| IdempotencyRejection::Internal)?
        } else {
            self.compute(version)
        };
        result.map_err(|e| match e {
            FingerprintError::DecodedTooLarge { limit } => {
                IdempotencyRejection::DecodedBodyTooLarge { limit }
            }
            _ => IdempotencyRejection::Internal,
        })
    }
}

/// The first header of a keyed request that the upstream could read otherwise than the
/// fingerprint does, in lower case: `Content-Type`, `Content-Encoding` or one of the route's
/// `fingerprint_headers` sent more than once, or `Content-Length` values that differ
/// (repeated equal values are allowed, RFC 9110 §8.6). The request is refused with `400
/// ambiguous-request`.
pub(crate) fn ambiguous_header(headers: &HeaderMap, rp: &RoutePolicy) -> Option<String> {
    const BODY: [HeaderName; 2] = [CONTENT_TYPE, CONTENT_ENCODING];
    let repeated = |name: &HeaderName| headers.get_all(name).iter().nth(1).is_some();
    if let Some(name) = BODY
        .iter()
        .chain(&rp.fingerprint_headers)
        .find(|n| repeated(n))
    {
        return Some(name.as_str().to_owned());
    }
    let mut lengths = headers
        .get_all(CONTENT_LENGTH)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .map(|v| std::str::from_utf8(v).ok()?.trim().parse::<u64>().ok());
    let first = lengths.next()?;
    lengths
        .any(|n| n != first)
        .then(|| CONTENT_LENGTH.as_str().to_owned())
}

/// One slot per CPU for heavy fingerprints, shared by every layer in the process.
static BLOCKING_SLOTS: LazyLock<Arc<Semaphore>> = LazyLock::new(|| {
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    Arc::new(Semaphore::new(cpus))
});

/// One lane (a semaphore of one) per principal with a heavy job running or waiting.
#[derive(Debug, Default)]
struct Lanes(Mutex<HashMap<String, Arc<Semaphore>>>);

impl Lanes {
    /// Waits for `principal`'s turn, held until the permit drops (then the next job of that
    /// principal runs). Idle lanes (nobody else holds them) are dropped as new ones are
    /// made, so the map holds only callers with heavy work under way.
    async fn enter(&self, principal: &str) -> OwnedSemaphorePermit {
        let lane = {
            let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(lane) = map.get(principal) {
                lane.clone()
            } else {
                map.retain(|_, lane| Arc::strong_count(lane) > 1);
                let lane = Arc::new(Semaphore::new(1));
                map.insert(principal.to_owned(), lane.clone());
                lane
            }
        };
        lane.acquire_owned().await.expect("lanes are never closed")
    }
}

/// The lanes of every layer in the process.
static LANES: LazyLock<Lanes> = LazyLock::new(Lanes::default);

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn one_principal_waits_in_its_lane_while_another_goes_ahead() {
        let lanes = Lanes::default();
        let first = lanes.enter("mallory").await;
        let again = tokio::time::timeout(Duration::from_millis(50), lanes.enter("mallory")).await;
        assert!(again.is_err(), "a second heavy job of one caller waits");
        let other = tokio::time::timeout(Duration::from_secs(5), lanes.enter("alice")).await;
        assert!(other.is_ok(), "another caller does not wait");
        drop(first);
        let next = tokio::time::timeout(Duration::from_secs(5), lanes.enter("mallory")).await;
        assert!(next.is_ok(), "the lane frees when the job ends");
    }

    #[tokio::test]
    async fn idle_lanes_are_dropped() {
        let lanes = Lanes::default();
        for i in 0..100 {
            drop(lanes.enter(&format!("p{i}")).await);
        }
        let held = lanes.enter("last").await;
        assert!(lanes.0.lock().unwrap().len() <= 2);
        drop(held);
    }
}
