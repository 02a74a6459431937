//! [`MemoryStore`]: records in a mutex-guarded map, for tests and development. Nothing
//! survives a restart.
//!
//! Records are kept in their raw form ([`RawRecord`]) and decoded through the same
//! validation as every other store's rows, so a record damaged with
//! [`MemoryStore::edit_raw`] is refused exactly as a damaged SQL row is.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

mod admin;
mod hooks;

use crate::durability::{Durability, DurabilityLevel};
use crate::gauges::{GaugedStore, RecordFacts, StoreCount};
use crate::integrity::RawRecord;
use crate::record::duration_ms as millis;
use crate::record::{
    IdempotencyRecord, Lease, LeaseToken, RecordState, ScopedKey, StoredResponse, UnixMillis,
};
use crate::store::{IdempotencyStore, InsertOutcome, InsertRequest, Peeked, Result, StoreError};

/// An in-memory store. Every operation holds one mutex for a few map operations, so each is
/// atomic. Its clock is the wall clock at creation advanced by tokio's monotonic clock, so
/// tests with a paused tokio clock (`tokio::time::pause`) control lease and TTL expiry.
#[derive(Debug)]
pub struct MemoryStore {
    records: Mutex<HashMap<ScopedKey, RawRecord>>,
    epoch: UnixMillis,
    started: Instant,
    /// Added to the clock ([`MemoryStore::shift_clock`]: a simulated clock jump); 0 unless set.
    shift: AtomicI64,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::starting_at(crate::record::now_millis())
    }
}

type Map = HashMap<ScopedKey, RawRecord>;

/// True when `raw` is past its TTL at `now` (an unreadable expiry never expires).
fn expired(raw: &RawRecord, now: UnixMillis) -> bool {
    raw.expires_at.is_some_and(|e| e <= now)
}

/// True when `raw` is `in_progress` and carries `lease`'s fence and token.
fn held(raw: &RawRecord, lease: &Lease, now: UnixMillis) -> bool {
    raw.state.as_deref() == Some(RecordState::InProgress.as_str())
        && raw.fence == Some(lease.fence)
        && raw.lease_token == Some(lease.token.0)
        && !expired(raw, now)
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The store's clock, in ms since the epoch.
    pub fn now(&self) -> UnixMillis {
        self.epoch
            .saturating_add(i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX))
            .saturating_add(self.shift.load(Ordering::Relaxed))
    }

    fn map(&self) -> MutexGuard<'_, Map> {
        // A panic while holding the lock cannot leave a half-written record: every critical
        // section replaces whole values.
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the raw record `lease` owns, or fails with `LeaseLost`.
    fn with_held<T>(&self, lease: &Lease, f: impl FnOnce(&mut Map, UnixMillis) -> T) -> Result<T> {
        let mut map = self.map();
        let now = self.now();
        match map.get(&lease.key) {
            Some(r) if held(r, lease, now) => Ok(f(&mut map, now)),
            _ => Err(StoreError::LeaseLost),
        }
    }

    /// Edits a stored record behind the store's back (tests of damaged records). Returns
    /// false when there is no record under `key`.
    pub fn edit_raw(&self, key: &ScopedKey, f: impl FnOnce(&mut RawRecord)) -> bool {
        self.map().get_mut(key).map(f).is_some()
    }

    /// Number of records held, expired ones included.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// True when no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn set_outcome(
        &self,
        lease: &Lease,
        state: RecordState,
        r: Option<&StoredResponse>,
    ) -> Result<()> {
        self.with_held(lease, |map, now| {
            if let Some(raw) = map.get_mut(&lease.key) {
                raw.set_outcome(state, r, now);
            }
        })
    }
}

impl IdempotencyStore for MemoryStore {
    async fn insert_or_get(&self, req: &InsertRequest) -> Result<InsertOutcome> {
        let mut map = self.map();
        let now = self.now();
        let fence = match map.get(&req.key) {
            Some(raw) if !expired(raw, now) => {
                let record = raw.clone().validate()?;
                return Ok(InsertOutcome::Existing { record, now });
            }
            // Past its TTL: replaced, and the fence keeps growing so no old lease matches.
            Some(raw) => raw.fence.unwrap_or(0).saturating_add(1),
            None => 1,
        };
        let lease_end = now.saturating_add(millis(req.lease_ttl));
        let expires_at = now.saturating_add(millis(req.record_ttl)).max(lease_end);
        let raw = RawRecord::in_progress(
            &req.key,
            req.fingerprint,
            fence,
            req.token,
            lease_end,
            now,
            expires_at,
        );
        map.insert(req.key.clone(), raw);
        Ok(InsertOutcome::Inserted(Lease {
            key: req.key.clone(),
            fence,
            token: req.token,
            expires_at: lease_end,
        }))
    }

    async fn take_over(
        &self,
        seen: &IdempotencyRecord,
        token: LeaseToken,
        lease_ttl: Duration,
    ) -> Result<Option<Lease>> {
        let mut map = self.map();
        let now = self.now();
        let Some(raw) = map.get_mut(&seen.key) else {
            return Ok(None);
        };
        let unchanged = raw.fence == Some(seen.fence)
            && raw.state.as_deref() == Some(seen.state.as_str())
            && raw.lease_token == seen.lease_token.map(|t| t.0)
            && raw.lease_expires_at == seen.lease_expires_at
            && !expired(raw, now);
        if !unchanged {
            return Ok(None);
        }
        let fence = seen.fence + 1;
        let lease_end = now.saturating_add(millis(lease_ttl));
        raw.state = Some(RecordState::InProgress.as_str().to_owned());
        raw.fence = Some(fence);
        raw.lease_token = Some(token.0);
        raw.lease_expires_at = Some(lease_end);
        raw.expires_at = raw.expires_at.map(|e| e.max(lease_end));
        raw.completed_at = None;
        (
            raw.status,
            raw.headers,
            raw.body,
            raw.replayable,
            raw.checksum,
        ) = (None, None, None, None, None);
        Ok(Some(Lease {
            key: seen.key.clone(),
            fence,
            token,
            expires_at: lease_end,
        }))
    }

    async fn renew(&self, lease: &Lease, lease_ttl: Duration) -> Result<UnixMillis> {
        self.with_held(lease, |map, now| {
            let until = now.saturating_add(millis(lease_ttl));
            if let Some(r) = map.get_mut(&lease.key) {
                r.lease_expires_at = Some(until);
                r.expires_at = r.expires_at.map(|e| e.max(until));
            }
            until
        })
    }

    async fn complete(&self, lease: &Lease, response: &StoredResponse) -> Result<()> {
        self.set_outcome(lease, RecordState::Completed, Some(response))
    }

    async fn fail(&self, lease: &Lease) -> Result<()> {
        self.set_outcome(lease, RecordState::Failed, None)
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        self.with_held(lease, |map, _| {
            map.remove(&lease.key);
        })
    }

    async fn get(&self, key: &ScopedKey) -> Result<Option<IdempotencyRecord>> {
        let now = self.now();
        let raw = self.map().get(key).filter(|r| !expired(r, now)).cloned();
        raw.map(RawRecord::validate).transpose()
    }

    /// A lookup under the map's lock: as cheap as the insert's own, so replays are
    /// answered without the acquire.
    async fn peek(&self, key: &ScopedKey) -> Result<Peeked> {
        let now = self.now();
        let raw = self.map().get(key).filter(|r| !expired(r, now)).cloned();
        Ok(match raw {
            Some(raw) => Peeked::Live {
                record: raw.validate()?,
                now,
            },
            None => Peeked::Absent,
        })
    }

    async fn purge_expired(&self, batch: NonZeroU32) -> Result<u64> {
        let mut map = self.map();
        let now = self.now();
        let doomed: Vec<ScopedKey> = map
            .iter()
            .filter(|(_, r)| expired(r, now))
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

impl GaugedStore for MemoryStore {
    /// Exact: one pass over the map under its mutex (O(records)).
    async fn gauges(&self) -> Result<StoreCount> {
        let map = self.map();
        let mut g = StoreCount {
            now: self.now(),
            expired: Some(0),
            body_bytes: Some(0),
            ..Default::default()
        };
        for raw in map.values() {
            let facts = RecordFacts {
                created_at: raw.created_at,
                expires_at: raw.expires_at,
                lease_expires_at: raw.lease_expires_at,
                body_bytes: raw.body.as_ref().map(|b| b.len() as u64),
            };
            g.count(raw.state.as_deref().and_then(RecordState::parse), facts);
        }
        Ok(g)
    }

    async fn count_sealed(&self) -> Result<Option<Vec<(String, u64)>>> {
        let mut by_id = std::collections::BTreeMap::<String, u64>::new();
        for id in self.map().values().filter_map(|r| r.sealed_by.clone()) {
            *by_id.entry(id).or_default() += 1;
        }
        Ok(Some(by_id.into_iter().collect()))
    }

    async fn count_expired(&self, limit: NonZeroU32) -> Result<Option<u64>> {
        let now = self.now();
        let n = self.map().values().filter(|r| expired(r, now)).count() as u64;
        Ok(Some(n.min(u64::from(limit.get()))))
    }

    /// [`DurabilityLevel::Volatile`]: records live in this process's memory.
    async fn durability(&self) -> Result<Durability> {
        Ok(Durability::new(
            DurabilityLevel::Volatile,
            "records live in this process's memory: a restart loses them all, and their keys would run again",
        ))
    }
}
