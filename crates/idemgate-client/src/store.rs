//! [`KeyServiceStore`]: the [`IdempotencyStore`] primitives over the key service's
//! `/v1/store/...`, so a gateway or a tower layer keeps its own policy (and decides once)
//! while many of them share one key service.
//!
//! Fails closed: a timeout, a refused connection or an answer that cannot be read is
//! [`StoreError::Timeout`] / [`StoreError::Unavailable`] / [`StoreError::Backend`], which
//! the lifecycle answers with `503` and never runs the operation on. Those leave the outcome
//! unknown ([`StoreError::outcome_unknown`]: the key service's store may have written);
//! a `4xx` problem (a route over 1,024 bytes, a bad token) is the key service's definite
//! refusal before its store was called: [`StoreError::Refused`].

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use idemgate_core::events::{EventSink, KeyEvent};
use idemgate_core::record::duration_ms;
use idemgate_core::store::Result;
use idemgate_core::{
    IdempotencyRecord, IdempotencyStore, InsertOutcome, InsertRequest, Lease, LeaseToken,
    ScopedKey, StoreError, StoredResponse, UnixMillis,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::client::{ClientError, KeyServiceClient};
use crate::store_wire::*;

mod events;

/// An [`IdempotencyStore`] whose records live in a key service
/// (`store = "idemgate://host:port"`), in the namespace of the client's token.
#[derive(Clone, Debug)]
pub struct KeyServiceStore {
    client: KeyServiceClient,
    /// The long-poll of key events runs (`events.rs`).
    listening: Arc<AtomicBool>,
}

impl KeyServiceStore {
    /// A store over `client` (its URL, token and timeout).
    pub fn new(client: KeyServiceClient) -> Self {
        Self {
            client,
            listening: Arc::default(),
        }
    }

    /// A store over a new client of `url` (`idemgate://host:port`, or `idemgates://` with the
    /// system's roots), with no token and the default timeout; for those, build the client
    /// ([`KeyServiceClient::with_token`], [`KeyServiceClient::with_timeout`]) and call
    /// [`KeyServiceStore::new`].
    ///
    /// # Errors
    /// [`ClientError::Url`] naming what is wrong with `url`.
    pub fn from_url(url: &str) -> Result<Self, ClientError> {
        KeyServiceClient::new(url).map(Self::new)
    }

    /// The client.
    pub fn client(&self) -> &KeyServiceClient {
        &self.client
    }

    /// `POST {path}` with `body`; a failed call as its [`StoreError`].
    async fn call<B: Serialize, R: DeserializeOwned>(&self, path: &str, body: &B) -> Result<R> {
        self.client.post(path, body).await.map_err(store_error)
    }

    /// `POST {path}` with the lease alone (`fail`, `release`).
    async fn post_lease(&self, path: &str, lease: &Lease) -> Result<()> {
        let body = LeaseBody {
            lease: lease_body(lease),
        };
        self.call(path, &body).await.map(|_: Done| ())
    }

    async fn post_complete(
        &self,
        lease: &Lease,
        response: &StoredResponse,
    ) -> std::result::Result<(), ClientError> {
        let body = CompleteBody {
            lease: lease_body(lease),
            response: StoreResponse::from_core(response),
        };
        let _: Done = self.client.post("/v1/store/complete", &body).await?;
        Ok(())
    }
}

/// The store error for a failed call.
fn store_error(e: ClientError) -> StoreError {
    match e {
        ClientError::Timeout(_) => StoreError::Timeout,
        ClientError::Unreachable(e) => StoreError::Unavailable(Box::new(e)),
        ClientError::Problem(p) => match p.anchor() {
            "lease-lost" => StoreError::LeaseLost,
            "record-corrupt" => StoreError::Corrupt { detail: p.detail },
            "store-unavailable" => StoreError::Unavailable(Box::new(ClientError::Problem(p))),
            // Refused before the key service called its store: nothing was written.
            _ if (400..500).contains(&p.status) => {
                StoreError::Refused(Box::new(ClientError::Problem(p)))
            }
            _ => StoreError::Backend(Box::new(ClientError::Problem(p))),
        },
        e => StoreError::Backend(Box::new(e)),
    }
}

fn decode_error(what: &str, e: String) -> StoreError {
    StoreError::Backend(format!("unexpected {what} from the key service: {e}").into())
}

/// A TTL on the wire: whole ms, at least 1.
fn ms(d: Duration) -> u64 {
    duration_ms(d).max(1).unsigned_abs()
}

fn lease_body(lease: &Lease) -> StoreLease {
    StoreLease::from_core(lease, StoreKey::from_core(&lease.key))
}

impl IdempotencyStore for KeyServiceStore {
    /// `POST /v1/store/announce` (`store/events.rs`).
    async fn announce(&self, event: &KeyEvent) -> Result<()> {
        self.publish(event).await
    }

    /// A long-poll of `POST /v1/wait` (`store/events.rs`).
    async fn listen(&self, sink: EventSink) {
        self.long_poll(sink).await
    }

    /// While the long-poll runs the poll only covers a lost event; otherwise it is how
    /// other processes' outcomes are seen.
    fn event_poll(&self) -> Duration {
        match self.listening.load(Ordering::Relaxed) {
            true => Duration::from_secs(2),
            false => Duration::from_millis(250),
        }
    }

    async fn insert_or_get(&self, req: &InsertRequest) -> Result<InsertOutcome> {
        let body = InsertBody {
            key: StoreKey::from_core(&req.key),
            fingerprint: StoreFingerprint::from_core(&req.fingerprint),
            token: token_hex(req.token),
            lease_ttl_ms: ms(req.lease_ttl),
            record_ttl_ms: ms(req.record_ttl),
        };
        let answer: InsertAnswer = self.call("/v1/store/insert_or_get", &body).await?;
        Ok(match answer {
            InsertAnswer::Inserted { lease } => {
                let lease = lease
                    .to_core(req.key.clone())
                    .map_err(|e| decode_error("lease", e))?;
                if lease.token != req.token {
                    return Err(decode_error("lease", "another token".into()));
                }
                InsertOutcome::Inserted(lease)
            }
            InsertAnswer::Existing { record, now } => InsertOutcome::Existing {
                record: record
                    .to_core(req.key.clone())
                    .map_err(|e| decode_error("record", e))?,
                now,
            },
        })
    }

    async fn take_over(
        &self,
        seen: &IdempotencyRecord,
        token: LeaseToken,
        lease_ttl: Duration,
    ) -> Result<Option<Lease>> {
        let body = TakeOverBody {
            seen: StoreRecord::from_core(seen, StoreKey::from_core(&seen.key)),
            token: token_hex(token),
            lease_ttl_ms: ms(lease_ttl),
        };
        let answer: TakeOverAnswer = self.call("/v1/store/take_over", &body).await?;
        answer
            .lease
            .map(|l| l.to_core(seen.key.clone()))
            .transpose()
            .map_err(|e| decode_error("lease", e))
    }

    async fn renew(&self, lease: &Lease, lease_ttl: Duration) -> Result<UnixMillis> {
        let body = RenewBody {
            lease: lease_body(lease),
            lease_ttl_ms: ms(lease_ttl),
        };
        let answer: RenewAnswer = self.call("/v1/store/renew", &body).await?;
        Ok(answer.expires_at)
    }

    /// A response the key service refuses to keep (`413 request-too-large` past its
    /// `max_request_bytes`, or `400 invalid-request`) is a final answer, not a blip: the
    /// key completes as not replayable (status only; retries get `410 response-not-kept`),
    /// never retried forever and never released (the operation ran).
    async fn complete(&self, lease: &Lease, response: &StoredResponse) -> Result<()> {
        match self.post_complete(lease, response).await {
            Err(ClientError::Problem(p))
                if response.replayable
                    && matches!(p.anchor(), "request-too-large" | "invalid-request") =>
            {
                tracing::warn!(
                    status = response.status,
                    detail = %p.detail,
                    "the key service refused the response; the key completes as not replayable"
                );
                let kept = StoredResponse {
                    status: response.status,
                    headers: Vec::new(),
                    body: Bytes::new(),
                    replayable: false,
                    sealed_by: None,
                };
                self.post_complete(lease, &kept).await.map_err(store_error)
            }
            other => other.map_err(store_error),
        }
    }

    async fn fail(&self, lease: &Lease) -> Result<()> {
        self.post_lease("/v1/store/fail", lease).await
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        self.post_lease("/v1/store/release", lease).await
    }

    async fn get(&self, key: &ScopedKey) -> Result<Option<IdempotencyRecord>> {
        let body = GetBody {
            key: StoreKey::from_core(key),
        };
        let answer: GetAnswer = self.call("/v1/store/get", &body).await?;
        answer
            .record
            .map(|r| r.to_core(key.clone()))
            .transpose()
            .map_err(|e| decode_error("record", e))
    }

    /// Purges through the service (admin clients only; the key service also purges on its
    /// own schedule).
    async fn purge_expired(&self, batch: NonZeroU32) -> Result<u64> {
        let body = PurgeBody { batch: batch.get() };
        let answer: PurgeAnswer = self.call("/v1/store/purge", &body).await?;
        Ok(answer.purged)
    }

    async fn ping(&self) -> Result<()> {
        let answer = self.client.get("/v1/store/ping").await;
        answer.map(|_: Done| ()).map_err(store_error)
    }

    fn backend(&self) -> &'static str {
        "key-service"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Problem;

    fn problem(anchor: &str, status: u16) -> ClientError {
        ClientError::Problem(Box::new(Problem {
            type_: format!("urn:idemgate:problem:{anchor}"),
            title: anchor.into(),
            status,
            detail: "detail".into(),
            field: None,
        }))
    }

    #[test]
    fn from_url_names_what_is_wrong() {
        let store = KeyServiceStore::from_url("idemgate://127.0.0.1:8081").unwrap();
        assert_eq!(store.client().base(), "http://127.0.0.1:8081");
        for (url, says) in [
            ("redis://h:1", "is not idemgate://"),
            ("127.0.0.1:8081", "has no scheme"),
            ("idemgate://user:pw@h:1", "without credentials"),
        ] {
            let err = KeyServiceStore::from_url(url).unwrap_err();
            assert!(matches!(err, ClientError::Url(_)), "{url}");
            assert!(err.to_string().contains(says), "{url}: {err}");
        }
    }

    /// A `4xx` is the key service's definite refusal; a `5xx` may hide a write of its store.
    #[test]
    fn a_4xx_is_a_definite_refusal_and_a_5xx_is_unknown() {
        let e = store_error(problem("invalid-request", 400));
        assert!(matches!(e, StoreError::Refused(_)), "{e:?}");
        assert!(!e.outcome_unknown());
        let e = store_error(problem("store-unavailable", 503));
        assert!(matches!(e, StoreError::Unavailable(_)), "{e:?}");
        assert!(e.outcome_unknown());
        let e = store_error(problem("internal", 500));
        assert!(e.outcome_unknown(), "{e:?}");
        assert!(matches!(
            store_error(problem("lease-lost", 409)),
            StoreError::LeaseLost
        ));
    }
}
