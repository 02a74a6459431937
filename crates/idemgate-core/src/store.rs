//! The store trait: the atomic primitives every backend provides. Stores persist; the
//! engine decides ([`crate::engine`]) and the lifecycle drives them ([`crate::lifecycle`]).
//! A store never produces an HTTP answer and never receives a policy knob.

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use crate::events::{EventSink, KeyEvent};
use crate::fingerprint::Fingerprint;
use crate::record::{IdempotencyRecord, Lease, LeaseToken, ScopedKey, StoredResponse, UnixMillis};

/// A boxed error from a backend driver.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors of store operations, classified so the lifecycle can answer correctly:
/// [`StoreError::LeaseLost`] refuses a stale holder, [`StoreError::Corrupt`] answers
/// `record-corrupt` (never a replay), and every other variant becomes `503` (fail closed)
/// unless the route is `fail_open`.
///
/// Whether a failed write may still have landed is [`StoreError::outcome_unknown`]: only
/// then does the lifecycle follow an insert up to release a record it may have left.
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
    /// A stored record fails validation ([`crate::integrity::RawRecord::validate`]); it is
    /// left untouched and never replayed.
    #[error("corrupt record: {detail}")]
    Corrupt {
        /// What is wrong.
        detail: String,
    },
    /// The store answered the call with an error and wrote nothing: a statement that failed
    /// (its transaction rolled back), a database busy or locked, a request the key service
    /// refused (`4xx`). Unlike [`StoreError::Unavailable`], [`StoreError::Timeout`] and
    /// [`StoreError::Backend`], its outcome is known.
    #[error("store refused the operation")]
    Refused(#[source] BoxError),
    /// Any other backend error.
    #[error("store error")]
    Backend(#[source] BoxError),
}

impl StoreError {
    /// True when a write that failed with this error may still have landed: the store did
    /// not answer in time ([`StoreError::Timeout`]), or the call failed in a way that leaves
    /// it open whether the store ran it ([`StoreError::Unavailable`]: a connection that
    /// broke after the statement may have been sent; [`StoreError::Backend`]). False for a
    /// definite answer: [`StoreError::Refused`], [`StoreError::Conflict`] (rolled back),
    /// [`StoreError::LeaseLost`] and [`StoreError::Corrupt`] (nothing changed).
    ///
    /// # Examples
    ///
    /// ```
    /// use idemgate_core::StoreError;
    ///
    /// assert!(StoreError::Timeout.outcome_unknown());
    /// assert!(!StoreError::Refused("index row size exceeds btree maximum".into()).outcome_unknown());
    /// ```
    pub fn outcome_unknown(&self) -> bool {
        matches!(
            self,
            Self::Unavailable(_) | Self::Timeout | Self::Backend(_)
        )
    }
}

/// Shorthand for store results.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// One insert-or-get: the record to create `in_progress` if the key holds no live record.
#[derive(Clone, Debug)]
pub struct InsertRequest {
    /// (principal, route, key).
    pub key: ScopedKey,
    /// The request's fingerprint, stored with the record.
    pub fingerprint: Fingerprint,
    /// The token the new lease will carry.
    pub token: LeaseToken,
    /// How long the lease lasts unless renewed. Defaults to 10 s in the gateway.
    pub lease_ttl: Duration,
    /// How long the record lives (`expires_at` = creation + this, and never before the
    /// lease's end). Defaults to 24 h.
    pub record_ttl: Duration,
}

/// What an insert-or-get found.
#[derive(Clone, Debug)]
pub enum InsertOutcome {
    /// There was no live record (none, or one past its `expires_at`, which is replaced with
    /// its fence + 1): the record is now `in_progress` under this lease.
    Inserted(Lease),
    /// A live record exists and was left untouched; the engine decides what it means.
    Existing {
        /// The record as stored, validated.
        record: IdempotencyRecord,
        /// The store's clock at the read, in ms since the epoch.
        now: UnixMillis,
    },
}

/// What [`IdempotencyStore::peek`] found.
// Returned once per request and consumed at once: boxing the record would cost every
// replay an allocation to save a move.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Peeked {
    /// The store does not read ahead of an acquire (the default): acquire as usual.
    NotRead,
    /// No live record: acquire with [`IdempotencyStore::insert_or_get_unseen`].
    Absent,
    /// A live record, exactly as [`InsertOutcome::Existing`] would give it.
    Live {
        /// The record as stored, validated.
        record: IdempotencyRecord,
        /// The store's clock at the read, in ms since the epoch.
        now: UnixMillis,
    },
}

/// An outcome write, for [`IdempotencyStore::write_announced`].
#[derive(Clone, Copy, Debug)]
pub enum OutcomeWrite<'a> {
    /// [`IdempotencyStore::complete`] with this response.
    Complete(&'a StoredResponse),
    /// [`IdempotencyStore::fail`].
    Fail,
    /// [`IdempotencyStore::release`].
    Release,
}

impl OutcomeWrite<'_> {
    /// The primitive's name, for metrics and logs: `complete`, `fail` or `release`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Complete(_) => "complete",
            Self::Fail => "fail",
            Self::Release => "release",
        }
    }
}

/// The atomic primitives of a backend. Each method is one atomic step; none of them decides
/// what an answer means (that is [`crate::engine`] and [`crate::lifecycle`]).
///
/// Records are decoded through [`crate::integrity::RawRecord::validate`], so a damaged
/// record is [`StoreError::Corrupt`] on every store. Time is the store's clock.
pub trait IdempotencyStore: Send + Sync + 'static {
    /// Inserts the record `in_progress` under a new lease if the key holds no live record
    /// (absent, or past its `expires_at`: replaced, fence + 1); otherwise returns the live
    /// record untouched. One round trip on the hot path; a read that finds a live record
    /// takes no write lock where the store has one. Never fails with "race lost but row
    /// missing".
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] if the live record fails validation; a backend error.
    fn insert_or_get(
        &self,
        req: &InsertRequest,
    ) -> impl Future<Output = Result<InsertOutcome>> + Send;

    /// Takes over `seen` by compare-and-set on what was read: if the stored record still
    /// has `seen`'s fence, state, lease token and lease expiry, it becomes `in_progress`
    /// with fence + 1, lease `token` until now + `lease_ttl`, no response, the same
    /// fingerprint and `created_at`, and `expires_at` pushed to at least the lease's end.
    /// Whether a takeover is allowed is the engine's decision, never the store's.
    ///
    /// Returns `None` when the record changed since it was read (or is gone).
    fn take_over(
        &self,
        seen: &IdempotencyRecord,
        token: LeaseToken,
        lease_ttl: Duration,
    ) -> impl Future<Output = Result<Option<Lease>>> + Send;

    /// Extends a held lease to now + `lease_ttl`, and the record's `expires_at` to at least
    /// that (a record never expires under a live lease); returns the new lease expiry.
    ///
    /// # Errors
    /// [`StoreError::LeaseLost`] if the record is not `in_progress` with the lease's fence
    /// and token.
    fn renew(
        &self,
        lease: &Lease,
        lease_ttl: Duration,
    ) -> impl Future<Output = Result<UnixMillis>> + Send;

    /// `in_progress` → `completed` with the response and its
    /// [`crate::integrity::response_checksum`], if the record still has the lease's fence
    /// and token (whether or not the lease itself lapsed: a late outcome of a live fence
    /// lands).
    ///
    /// # Errors
    /// [`StoreError::LeaseLost`] if the lease is stale.
    fn complete(
        &self,
        lease: &Lease,
        response: &StoredResponse,
    ) -> impl Future<Output = Result<()>> + Send;

    /// `in_progress` → `failed`, fenced like [`IdempotencyStore::complete`].
    ///
    /// # Errors
    /// [`StoreError::LeaseLost`] if the lease is stale.
    fn fail(&self, lease: &Lease) -> impl Future<Output = Result<()>> + Send;

    /// Deletes an `in_progress` record whose operation did not run, fenced like
    /// [`IdempotencyStore::complete`].
    ///
    /// # Errors
    /// [`StoreError::LeaseLost`] if the lease is stale.
    fn release(&self, lease: &Lease) -> impl Future<Output = Result<()>> + Send;

    /// Reads a live record (an expired one reads as `None`).
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] if the record fails validation; a backend error.
    fn get(
        &self,
        key: &ScopedKey,
    ) -> impl Future<Output = Result<Option<IdempotencyRecord>>> + Send;

    /// Reads the live record of `key` ahead of an acquire, for a store whose
    /// [`IdempotencyStore::insert_or_get`] reads before it writes anyway (on a read path that
    /// takes no write lock and no round trip): a front door then answers a replay, a
    /// conflict or a mismatch before it starts the work that must outlive its client, and
    /// acquires an absent key with [`IdempotencyStore::insert_or_get_unseen`]. It writes
    /// nothing, so dropping it is harmless. The default reads nothing: [`Peeked::NotRead`].
    ///
    /// # Errors
    /// As [`IdempotencyStore::get`].
    fn peek(&self, key: &ScopedKey) -> impl Future<Output = Result<Peeked>> + Send {
        let _ = key;
        std::future::ready(Ok(Peeked::NotRead))
    }

    /// [`IdempotencyStore::insert_or_get`] right after [`IdempotencyStore::peek`] found no
    /// live record: the same atomic step and answers, minus the read ahead that the peek
    /// just made (a record written in between is still found by the write). The default
    /// is `insert_or_get`.
    ///
    /// # Errors
    /// As [`IdempotencyStore::insert_or_get`].
    fn insert_or_get_unseen(
        &self,
        req: &InsertRequest,
    ) -> impl Future<Output = Result<InsertOutcome>> + Send {
        self.insert_or_get(req)
    }

    /// Sends `event` to the other processes that use this store, for their duplicates that
    /// wait on the key ([`crate::lifecycle::InFlightPolicy::Wait`]). Called after the write
    /// it tells of landed, only on routes that wait; the sender's own waiters hear of it
    /// in process. The default sends nothing (other processes then see the change by their
    /// slow poll, [`IdempotencyStore::event_poll`]).
    ///
    /// # Errors
    /// A backend error: the event is lost, which delays the others' answers (and makes a
    /// release read as a vanished record: not run again by waiters).
    fn announce(&self, event: &KeyEvent) -> impl Future<Output = Result<()>> + Send {
        let _ = event;
        std::future::ready(Ok(()))
    }

    /// Writes `write` under `lease` and, once it landed, sends `event` to the other
    /// processes ([`IdempotencyStore::announce`]): the lifecycle's outcome write on a route
    /// that waits. A store whose write can carry the event in the same round trip does
    /// (Redis: the outcome script publishes it). The default writes, then announces; a
    /// failed announcement is logged and the write still `Ok` (the others' slow poll covers
    /// it).
    ///
    /// # Errors
    /// As the write ([`IdempotencyStore::complete`], [`IdempotencyStore::fail`],
    /// [`IdempotencyStore::release`]).
    fn write_announced(
        &self,
        lease: &Lease,
        write: OutcomeWrite<'_>,
        event: &KeyEvent,
    ) -> impl Future<Output = Result<()>> + Send {
        async move {
            match write {
                OutcomeWrite::Complete(response) => self.complete(lease, response).await?,
                OutcomeWrite::Fail => self.fail(lease).await?,
                OutcomeWrite::Release => self.release(lease).await?,
            }
            if let Err(e) = self.announce(event).await {
                tracing::warn!(error = %crate::report::error_text(&e), "key event not sent to other processes");
            }
            Ok(())
        }
    }

    /// Receives other processes' [`IdempotencyStore::announce`] events and hands them to
    /// `sink` until it is no longer live, reconnecting after a failure (and then calling
    /// [`EventSink::missed`]). Started once per lifecycle, when its first duplicate waits.
    /// The default returns at once: no events from other processes.
    fn listen(&self, sink: EventSink) -> impl Future<Output = ()> + Send {
        drop(sink);
        std::future::ready(())
    }

    /// How often, at most, a waited key is read when no event comes: the bound on how late
    /// a missed event, or another process's write on a store without events, is seen.
    /// Defaults to 250 ms; stores with [`IdempotencyStore::listen`] poll more slowly.
    fn event_poll(&self) -> Duration {
        Duration::from_millis(250)
    }

    /// Deletes at most `batch` records whose `expires_at` has passed, returning how many.
    /// A record re-acquired after expiry is live again and never deleted. Callers loop.
    fn purge_expired(&self, batch: NonZeroU32) -> impl Future<Output = Result<u64>> + Send;

    /// Checks that the store answers (for `/readyz`).
    fn ping(&self) -> impl Future<Output = Result<()>> + Send;

    /// A short backend name for metrics and logs, e.g. `sqlite`.
    fn backend(&self) -> &'static str;
}

impl<S: IdempotencyStore> IdempotencyStore for Arc<S> {
    async fn insert_or_get(&self, req: &InsertRequest) -> Result<InsertOutcome> {
        (**self).insert_or_get(req).await
    }
    async fn take_over(
        &self,
        seen: &IdempotencyRecord,
        token: LeaseToken,
        lease_ttl: Duration,
    ) -> Result<Option<Lease>> {
        (**self).take_over(seen, token, lease_ttl).await
    }
    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<UnixMillis> {
        (**self).renew(lease, ttl).await
    }
    async fn complete(&self, lease: &Lease, r: &StoredResponse) -> Result<()> {
        (**self).complete(lease, r).await
    }
    async fn fail(&self, lease: &Lease) -> Result<()> {
        (**self).fail(lease).await
    }
    async fn release(&self, lease: &Lease) -> Result<()> {
        (**self).release(lease).await
    }
    async fn get(&self, key: &ScopedKey) -> Result<Option<IdempotencyRecord>> {
        (**self).get(key).await
    }
    async fn peek(&self, key: &ScopedKey) -> Result<Peeked> {
        (**self).peek(key).await
    }
    async fn insert_or_get_unseen(&self, req: &InsertRequest) -> Result<InsertOutcome> {
        (**self).insert_or_get_unseen(req).await
    }
    async fn announce(&self, event: &KeyEvent) -> Result<()> {
        (**self).announce(event).await
    }
    async fn write_announced(
        &self,
        lease: &Lease,
        write: OutcomeWrite<'_>,
        event: &KeyEvent,
    ) -> Result<()> {
        (**self).write_announced(lease, write, event).await
    }
    async fn listen(&self, sink: EventSink) {
        (**self).listen(sink).await
    }
    fn event_poll(&self) -> Duration {
        (**self).event_poll()
    }
    async fn purge_expired(&self, batch: NonZeroU32) -> Result<u64> {
        (**self).purge_expired(batch).await
    }
    async fn ping(&self) -> Result<()> {
        (**self).ping().await
    }
    fn backend(&self) -> &'static str {
        (**self).backend()
    }
}
