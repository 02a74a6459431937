//! Fingerprinting of large or encoded bodies off the async worker threads.
//!
//! Decoding and canonicalizing a body can take milliseconds per megabyte, and a small gzip
//! body may inflate a thousandfold up to the decoded-body limit. Such work runs on tokio's
//! blocking pool, at most one job per CPU at a time (a FIFO semaphore): a flood of bombs
//! queues among itself, while small identity bodies are fingerprinted inline and never
//! wait behind it.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::header::CONTENT_ENCODING;
use http::{HeaderMap, Method, Uri};
use idemgate_core::fingerprint::FingerprintError;
use idemgate_core::Fingerprint;
use tokio::sync::Semaphore;

use crate::admission::fingerprint_of;
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
}

impl FingerprintJob {
    fn compute(&self, version: u16) -> Result<Fingerprint, FingerprintError> {
        let req = (&self.method, &self.uri, &self.headers);
        fingerprint_of(req, &self.route, &self.policy, &self.body, version)
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
            let slots = blocking_slots().clone();
            let Ok(permit) = slots.acquire_owned().await else {
                return Err(IdempotencyRejection::Internal); // never closed
            };
            let job = tokio::task::spawn_blocking(move || {
                let _permit = permit;
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

/// One slot per CPU for heavy fingerprints, shared by every layer in the process.
fn blocking_slots() -> &'static Arc<Semaphore> {
    static SLOTS: OnceLock<Arc<Semaphore>> = OnceLock::new();
    SLOTS.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        Arc::new(Semaphore::new(cpus))
    })
}
