//! Hooks for simulations (`crates/idemgate-sim`): an injected clock start, clock jumps, and
//! whole raw records read and written, so a simulated replica can copy the store.

use std::sync::atomic::Ordering;

use tokio::time::Instant;

use crate::integrity::RawRecord;
use crate::record::{ScopedKey, UnixMillis};

use super::MemoryStore;

impl MemoryStore {
    /// An empty store whose clock reads `epoch` now and then advances with tokio's clock (so
    /// a simulation under a paused clock, started at a fixed `epoch`, reads the same times
    /// on every run).
    pub fn starting_at(epoch: UnixMillis) -> Self {
        Self {
            records: std::sync::Mutex::default(),
            epoch,
            started: Instant::now(),
            shift: std::sync::atomic::AtomicI64::new(0),
        }
    }

    /// Moves the store's clock by `by_ms` (negative: back), as a clock step of the
    /// database host would: leases and TTLs are judged by the moved clock.
    pub fn shift_clock(&self, by_ms: i64) {
        self.shift.fetch_add(by_ms, Ordering::Relaxed);
    }

    /// The raw record under `key`, expired or not.
    pub fn raw(&self, key: &ScopedKey) -> Option<RawRecord> {
        self.map().get(key).cloned()
    }

    /// Every raw record, expired ones included, in no particular order.
    pub fn raw_records(&self) -> Vec<RawRecord> {
        self.map().values().cloned().collect()
    }

    /// Stores `raw` under its key as it is (replacing any record), or removes the key's
    /// record when `raw` is `None`: a replica applying what its primary wrote.
    pub fn put_raw(&self, key: &ScopedKey, raw: Option<RawRecord>) {
        let mut map = self.map();
        match raw {
            Some(raw) => map.insert(key.clone(), raw),
            None => map.remove(key),
        };
    }
}
