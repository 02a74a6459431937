//! A memory store with faults the lifecycle tests switch on.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::memory::MemoryStore;
use crate::record::{IdempotencyRecord, Lease, LeaseToken, ScopedKey, StoredResponse, UnixMillis};
use crate::store::{IdempotencyStore, InsertOutcome, InsertRequest, StoreError};

use super::HANG;

/// The memory store with faults a test switches on: every call fails (`down`), every call
/// hangs (`hang`), or the next `take_over`s report a changed record.
#[derive(Debug, Default)]
pub(super) struct Faulty {
    pub(super) inner: MemoryStore,
    pub(super) down: AtomicBool,
    pub(super) hang: AtomicBool,
    pub(super) refuse_take_overs: AtomicUsize,
    /// The insert lands, but its answer is lost (the connection broke after sending).
    pub(super) lose_insert_reply: AtomicBool,
    /// With `lose_insert_reply`: the store goes down right after.
    pub(super) down_after_insert: AtomicBool,
    /// With `lose_insert_reply`: the call never answers at all (the reply was swallowed).
    pub(super) swallow_insert_reply: AtomicBool,
    /// The insert fails at once, and the test lands it later from `deferred` (a statement
    /// the database finishes after the connection that sent it broke).
    pub(super) defer_insert: AtomicBool,
    pub(super) deferred: std::sync::Mutex<Option<InsertRequest>>,
    /// Every call is refused with a definite answer (PostgreSQL's "index row size exceeds
    /// btree maximum" for a very long route): nothing is written.
    pub(super) refuse: AtomicBool,
    pub(super) calls: AtomicUsize,
}

impl Faulty {
    async fn fault(&self) -> Result<(), StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.hang.load(Ordering::SeqCst) {
            tokio::time::sleep(HANG).await;
        }
        if self.down.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("store down".into()));
        }
        if self.refuse.load(Ordering::SeqCst) {
            return Err(StoreError::Refused(
                "index row size exceeds btree maximum".into(),
            ));
        }
        Ok(())
    }
}

impl IdempotencyStore for Faulty {
    async fn insert_or_get(&self, req: &InsertRequest) -> Result<InsertOutcome, StoreError> {
        self.fault().await?;
        if self.defer_insert.swap(false, Ordering::SeqCst) {
            *self.deferred.lock().unwrap() = Some(req.clone());
            return Err(StoreError::Unavailable("connection closed".into()));
        }
        let found = self.inner.insert_or_get(req).await;
        if self.lose_insert_reply.load(Ordering::SeqCst) {
            if self.swallow_insert_reply.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            if self.down_after_insert.swap(false, Ordering::SeqCst) {
                self.down.store(true, Ordering::SeqCst);
            }
            return Err(StoreError::Unavailable("connection closed".into()));
        }
        found
    }
    async fn take_over(
        &self,
        seen: &IdempotencyRecord,
        token: LeaseToken,
        ttl: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        self.fault().await?;
        let refuse = self.refuse_take_overs.load(Ordering::SeqCst);
        if refuse > 0 {
            self.refuse_take_overs.store(refuse - 1, Ordering::SeqCst);
            return Ok(None);
        }
        self.inner.take_over(seen, token, ttl).await
    }
    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<UnixMillis, StoreError> {
        self.fault().await?;
        self.inner.renew(lease, ttl).await
    }
    async fn complete(&self, lease: &Lease, r: &StoredResponse) -> Result<(), StoreError> {
        self.fault().await?;
        self.inner.complete(lease, r).await
    }
    async fn fail(&self, lease: &Lease) -> Result<(), StoreError> {
        self.fault().await?;
        self.inner.fail(lease).await
    }
    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.fault().await?;
        self.inner.release(lease).await
    }
    async fn get(&self, key: &ScopedKey) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.fault().await?;
        self.inner.get(key).await
    }
    async fn purge_expired(&self, batch: NonZeroU32) -> Result<u64, StoreError> {
        self.inner.purge_expired(batch).await
    }
    async fn ping(&self) -> Result<(), StoreError> {
        self.fault().await
    }
    fn backend(&self) -> &'static str {
        "faulty-memory"
    }
}
