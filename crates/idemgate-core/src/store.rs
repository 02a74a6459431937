//! The store trait: the atomic primitives every backend provides. Stores persist; the
//! engine decides ([`crate::engine`]). A store never produces an HTTP answer.

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use crate::engine::DecisionPolicy;
use crate::fingerprint::Fingerprint;
use crate::record::{IdempotencyRecord, Lease, LeaseToken, ScopedKey, StoredResponse, UnixMillis};

/// A boxed error from a backend driver.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors of store operations, classified so the HTTP layer can answer correctly: every
/// variant but [`StoreError::LeaseLost`] becomes `503` (fail closed) unless the route is
/// `fail_open`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The lease presented is stale: the record was taken over, completed, released or
    /// purged. The write was refused and nothing changed.
    #[error("the lease is no longer held (the record was taken over or removed)")]
    LeaseLost,
    /// The store cannot be reached (connection refused, pool exhausted, database locked).
    #[error("store unavailable")]
    Unavailable(#[source] BoxError),
    /// The store did not answer in time.
    #[error("store timed out")]
    Timeout,
    /// A transaction conflict the store could not resolve (serialization failure).
    #[error("store conflict")]
    Conflict(#[source] BoxError),
    /// A stored record cannot be read; it is left untouched.
    #[error("corrupt record: {detail}")]
    Corrupt {
        /// What is wrong.
        detail: String,
    },
    /// Any other backend error.
    #[error("store error")]
    Backend(#[source] BoxError),
}

/// Shorthand for store results.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// One acquire attempt.
#[derive(Clone, Debug)]
pub struct AcquireRequest {
    /// (principal, route, key).
    pub key: ScopedKey,
    /// The request's fingerprint.
    pub fingerprint: Fingerprint,
    /// The token the new lease will carry.
    pub token: LeaseToken,
    /// How long the lease lasts unless renewed. Defaults to 10 s in the gateway.
    pub lease_ttl: Duration,
    /// How long the record lives (`expires_at` = creation + this). Defaults to 24 h.
    pub record_ttl: Duration,
    /// Takeover and retry rules.
    pub policy: DecisionPolicy,
}

/// What an acquire found.
#[derive(Clone, Debug)]
pub enum AcquireOutcome {
    /// This request owns the record now and must run.
    Acquired {
        /// Proof of ownership for `renew`/`complete`/`fail`/`release`.
        lease: Lease,
        /// True when an expired lease (or a failed record) was taken over.
        takeover: bool,
    },
    /// A live record exists; [`crate::engine::decide`] says what to answer.
    Existing {
        /// The record as stored.
        record: IdempotencyRecord,
        /// The store's clock at the read, in ms since the epoch.
        now: UnixMillis,
    },
}

/// The atomic primitives of a backend. Each method is one atomic step.
pub trait IdempotencyStore: Send + Sync + 'static {
    /// Inserts the record `in_progress`, or takes over one the decision allows
    /// ([`crate::engine::Decision::Insert`]/[`crate::engine::Decision::Takeover`]); otherwise
    /// returns the live record. Never fails with "race lost but row missing".
    fn acquire(&self, req: &AcquireRequest) -> impl Future<Output = Result<AcquireOutcome>> + Send;

    /// Extends a held lease to now + `lease_ttl`, and the record's `expires_at` to at least
    /// that (a record never expires under a live lease); returns the new lease expiry.
    ///
    /// # Errors
    /// [`StoreError::LeaseLost`] if the lease is stale.
    fn renew(
        &self,
        lease: &Lease,
        lease_ttl: Duration,
    ) -> impl Future<Output = Result<UnixMillis>> + Send;

    /// `in_progress` → `completed` with the response, if the lease is still held.
    ///
    /// # Errors
    /// [`StoreError::LeaseLost`] if the lease is stale.
    fn complete(
        &self,
        lease: &Lease,
        response: &StoredResponse,
    ) -> impl Future<Output = Result<()>> + Send;

    /// `in_progress` → `failed`, if the lease is still held.
    ///
    /// # Errors
    /// [`StoreError::LeaseLost`] if the lease is stale.
    fn fail(&self, lease: &Lease) -> impl Future<Output = Result<()>> + Send;

    /// Deletes an `in_progress` record whose operation did not run, if the lease is still held.
    ///
    /// # Errors
    /// [`StoreError::LeaseLost`] if the lease is stale.
    fn release(&self, lease: &Lease) -> impl Future<Output = Result<()>> + Send;

    /// Reads a live record (an expired one reads as `None`).
    fn get(
        &self,
        key: &ScopedKey,
    ) -> impl Future<Output = Result<Option<IdempotencyRecord>>> + Send;

    /// Deletes at most `batch` records whose `expires_at` has passed, returning how many.
    /// A record re-acquired after expiry is live again and never deleted. Callers loop.
    fn purge_expired(&self, batch: NonZeroU32) -> impl Future<Output = Result<u64>> + Send;

    /// Checks that the store answers (for `/readyz`).
    fn ping(&self) -> impl Future<Output = Result<()>> + Send;

    /// A short backend name for metrics and logs, e.g. `sqlite`.
    fn backend(&self) -> &'static str;
}

impl<S: IdempotencyStore> IdempotencyStore for Arc<S> {
    fn acquire(&self, req: &AcquireRequest) -> impl Future<Output = Result<AcquireOutcome>> + Send {
        (**self).acquire(req)
    }
    fn renew(
        &self,
        lease: &Lease,
        ttl: Duration,
    ) -> impl Future<Output = Result<UnixMillis>> + Send {
        (**self).renew(lease, ttl)
    }
    fn complete(
        &self,
        lease: &Lease,
        r: &StoredResponse,
    ) -> impl Future<Output = Result<()>> + Send {
        (**self).complete(lease, r)
    }
    fn fail(&self, lease: &Lease) -> impl Future<Output = Result<()>> + Send {
        (**self).fail(lease)
    }
    fn release(&self, lease: &Lease) -> impl Future<Output = Result<()>> + Send {
        (**self).release(lease)
    }
    fn get(
        &self,
        key: &ScopedKey,
    ) -> impl Future<Output = Result<Option<IdempotencyRecord>>> + Send {
        (**self).get(key)
    }
    fn purge_expired(&self, batch: NonZeroU32) -> impl Future<Output = Result<u64>> + Send {
        (**self).purge_expired(batch)
    }
    fn ping(&self) -> impl Future<Output = Result<()>> + Send {
        (**self).ping()
    }
    fn backend(&self) -> &'static str {
        (**self).backend()
    }
}
