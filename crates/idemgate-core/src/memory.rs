//! [`MemoryStore`]: records in a mutex-guarded map, for tests and development. Nothing
//! survives a restart.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::engine::apply_acquire;
use crate::record::{IdempotencyRecord, Lease, RecordState, ScopedKey, StoredResponse, UnixMillis};
use crate::store::{AcquireOutcome, AcquireRequest, IdempotencyStore, Result, StoreError};

pub use crate::record::now_millis;

/// True when `record` is live, `in_progress` and owned by `lease`.
pub fn holds(record: &IdempotencyRecord, lease: &Lease, now: UnixMillis) -> bool {
    record.state == RecordState::InProgress
        && record.fence == lease.fence
        && record.lease_token == Some(lease.token)
        && now < record.expires_at
}

/// An in-memory store. Every operation holds one mutex for a few map operations, so each is
/// atomic; expiry uses the process clock.
#[derive(Debug, Default)]
pub struct MemoryStore {
    records: Mutex<HashMap<ScopedKey, IdempotencyRecord>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn map(&self) -> MutexGuard<'_, HashMap<ScopedKey, IdempotencyRecord>> {
        // A panic while holding the lock cannot leave a half-written record: every critical
        // section replaces whole values.
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the record `lease` owns, or fails with `LeaseLost`.
    fn with_held<T>(
        &self,
        lease: &Lease,
        f: impl FnOnce(&mut HashMap<ScopedKey, IdempotencyRecord>, UnixMillis) -> T,
    ) -> Result<T> {
        let mut map = self.map();
        let now = now_millis();
        match map.get(&lease.key) {
            Some(r) if holds(r, lease, now) => Ok(f(&mut map, now)),
            _ => Err(StoreError::LeaseLost),
        }
    }

    /// Number of records held, expired ones included.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// True when no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl IdempotencyStore for MemoryStore {
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome> {
        let mut map = self.map();
        let current = map.get(&req.key).cloned();
        let (row, outcome) = apply_acquire(current, req, now_millis());
        if let Some(row) = row {
            map.insert(req.key.clone(), row);
        }
        Ok(outcome)
    }

    async fn renew(&self, lease: &Lease, lease_ttl: Duration) -> Result<UnixMillis> {
        self.with_held(lease, |map, now| {
            let until = now + lease_ttl.as_millis() as i64;
            if let Some(r) = map.get_mut(&lease.key) {
                r.lease_expires_at = Some(until);
                r.expires_at = r.expires_at.max(until);
            }
            until
        })
    }

    async fn complete(&self, lease: &Lease, response: &StoredResponse) -> Result<()> {
        self.with_held(lease, |map, now| {
            if let Some(r) = map.get_mut(&lease.key) {
                r.state = RecordState::Completed;
                r.completed_at = Some(now);
                r.lease_token = None;
                r.lease_expires_at = None;
                r.response = Some(response.clone());
            }
        })
    }

    async fn fail(&self, lease: &Lease) -> Result<()> {
        self.with_held(lease, |map, now| {
            if let Some(r) = map.get_mut(&lease.key) {
                r.state = RecordState::Failed;
                r.completed_at = Some(now);
                r.lease_token = None;
                r.lease_expires_at = None;
            }
        })
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        self.with_held(lease, |map, _| {
            map.remove(&lease.key);
        })
    }

    async fn get(&self, key: &ScopedKey) -> Result<Option<IdempotencyRecord>> {
        let now = now_millis();
        Ok(self.map().get(key).filter(|r| now < r.expires_at).cloned())
    }

    async fn purge_expired(&self, batch: NonZeroU32) -> Result<u64> {
        let mut map = self.map();
        let now = now_millis();
        let doomed: Vec<ScopedKey> = map
            .iter()
            .filter(|(_, r)| r.expires_at <= now)
            .map(|(k, _)| k.clone())
            .take(batch.get() as usize)
            .collect();
        for k in &doomed {
            map.remove(k);
        }
        Ok(doomed.len() as u64)
    }

    async fn ping(&self) -> Result<()> {
        Ok(())
    }

    fn backend(&self) -> &'static str {
        "memory"
    }
}
