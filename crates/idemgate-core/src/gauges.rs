//! What a store holds: one count for `idemgate stats` and for the gauges an operator alerts
//! on (DESIGN.md, "TTL and cleanup": a purge that stops or falls behind must be seen before
//! the table grows without bound).
//!
//! [`GaugedStore::gauges`] reads a [`StoreCount`]; [`StoreCount::export`] sets the gauges
//! through the `metrics` facade. Each store says in its docs how exact each number is, and
//! [`StoreCount::approximate`] marks a count that is an estimate: the in-memory store
//! counts exactly (one scan); SQLite counts exactly (one scan) below 100,000 records and
//! from indexes and a sample above; PostgreSQL counts exactly below 100,000 live rows and
//! from catalog statistics above; Redis scans a small database and samples keys past that.

use std::future::Future;
use std::num::NonZeroU32;

use crate::durability::{Durability, DurabilityLevel};
use crate::record::{RecordState, UnixMillis};
use crate::store::{IdempotencyStore, Result};

/// What a store holds, read once. Counts are records; times are ms since the epoch on the
/// store's clock. `None` means the store cannot tell (see each field).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StoreCount {
    /// The store's clock when the snapshot was taken, in ms since the epoch.
    pub now: UnixMillis,
    /// Records `in_progress`, expired ones not yet purged included.
    pub in_progress: u64,
    /// Records `completed`.
    pub completed: u64,
    /// Records `failed`.
    pub failed: u64,
    /// Records whose state is missing or unknown (corrupt).
    pub unknown_state: u64,
    /// Sum of the stored response bodies, in bytes, where the store can add them up.
    pub body_bytes: Option<u64>,
    /// Bytes the store's table takes on disk (heap, indexes, TOAST), where it has one.
    pub table_bytes: Option<u64>,
    /// Dead row versions waiting for vacuum (PostgreSQL).
    pub dead_rows: Option<u64>,
    /// `created_at` of the oldest record held; `None` when empty.
    pub oldest_created_at: Option<UnixMillis>,
    /// Records past their `expires_at` not yet purged. `None` where the store expires
    /// records itself (Redis drops a key at its `expires_at`: nothing waits for a purge).
    pub expired: Option<u64>,
    /// Live `in_progress` records whose lease has expired (or is missing): their holder
    /// died and no retry has taken them over yet.
    pub stuck_in_progress: u64,
    /// True when the counts are estimates (sampling, catalog statistics); false when every
    /// record was counted.
    pub approximate: bool,
}

impl StoreCount {
    /// All records held, every state (unknown ones included), expired ones not yet purged
    /// included.
    pub fn records(&self) -> u64 {
        self.in_progress + self.completed + self.failed + self.unknown_state
    }

    /// Seconds since the oldest record was created (0 when empty).
    pub fn oldest_age_seconds(&self) -> f64 {
        self.oldest_created_at
            .map_or(0.0, |t| (self.now - t).max(0) as f64 / 1000.0)
    }

    /// Sets the gauges, each labelled `backend` (e.g. `sqlite`):
    /// `idempotency_records{state}`, `idempotency_record_body_bytes`,
    /// `idempotency_store_table_bytes`, `idempotency_store_dead_rows`,
    /// `idempotency_oldest_record_age_seconds`, `idempotency_expired_records`,
    /// `idempotency_stuck_in_progress_records`, `idempotency_store_gauges_approximate`
    /// (1 or 0). A gauge the store cannot tell is not set. On Redis
    /// `idempotency_expired_records` is 0: Redis expires records itself.
    pub fn export(&self, backend: &'static str) {
        // `unknown`: records whose state no reader understands (corrupt): retries get
        // `record-corrupt`.
        for (state, n) in [
            (RecordState::InProgress.as_str(), self.in_progress),
            (RecordState::Completed.as_str(), self.completed),
            (RecordState::Failed.as_str(), self.failed),
            ("unknown", self.unknown_state),
        ] {
            metrics::gauge!("idempotency_records", "backend" => backend, "state" => state)
                .set(n as f64);
        }
        let set = |name: &'static str, v: u64| {
            metrics::gauge!(name, "backend" => backend).set(v as f64);
        };
        for (name, v) in [
            ("idempotency_record_body_bytes", self.body_bytes),
            ("idempotency_store_table_bytes", self.table_bytes),
            ("idempotency_store_dead_rows", self.dead_rows),
        ] {
            if let Some(v) = v {
                set(name, v);
            }
        }
        set("idempotency_expired_records", self.expired.unwrap_or(0));
        set(
            "idempotency_stuck_in_progress_records",
            self.stuck_in_progress,
        );
        set(
            "idempotency_store_gauges_approximate",
            u64::from(self.approximate),
        );
        metrics::gauge!("idempotency_oldest_record_age_seconds", "backend" => backend)
            .set(self.oldest_age_seconds());
    }

    /// Adds one record to the counts (for stores that scan their records). With `expired`
    /// `None` (a store that deletes records itself at their expiry), a record already past
    /// its `expires_at` is absent and not counted.
    pub fn count(&mut self, state: Option<RecordState>, rec: RecordFacts) {
        let expired = rec.expires_at.is_some_and(|e| e <= self.now);
        if expired && self.expired.is_none() {
            return;
        }
        match state {
            Some(RecordState::InProgress) => self.in_progress += 1,
            Some(RecordState::Completed) => self.completed += 1,
            Some(RecordState::Failed) => self.failed += 1,
            None => self.unknown_state += 1,
        }
        if expired {
            if let Some(n) = self.expired.as_mut() {
                *n += 1;
            }
        } else if state == Some(RecordState::InProgress)
            && rec.lease_expires_at.is_none_or(|l| l <= self.now)
        {
            self.stuck_in_progress += 1;
        }
        if let (Some(total), Some(b)) = (self.body_bytes.as_mut(), rec.body_bytes) {
            *total += b;
        }
        if let Some(c) = rec.created_at {
            self.oldest_created_at = Some(self.oldest_created_at.map_or(c, |o| o.min(c)));
        }
    }
}

/// What [`StoreCount::count`] needs of one record.
#[derive(Clone, Copy, Debug, Default)]
pub struct RecordFacts {
    /// `created_at`, ms.
    pub created_at: Option<UnixMillis>,
    /// `expires_at`, ms.
    pub expires_at: Option<UnixMillis>,
    /// `lease_expires_at`, ms.
    pub lease_expires_at: Option<UnixMillis>,
    /// Length of the stored body, bytes.
    pub body_bytes: Option<u64>,
}

/// A store that can count what it holds and what a purge would delete.
pub trait GaugedStore: IdempotencyStore {
    /// Counts what the store holds: exactly, or an estimate marked
    /// [`StoreCount::approximate`]. Cheap enough to call every few seconds (each store's
    /// docs give the cost and say when it estimates).
    ///
    /// # Errors
    /// A store error, classified as for the store operations.
    fn gauges(&self) -> impl Future<Output = Result<StoreCount>> + Send;

    /// Counts what the store holds exactly, reading every record if it must (`idemgate
    /// stats`: an operator's question, asked once). By default [`GaugedStore::gauges`]; the
    /// stores whose gauges estimate past a size override it.
    ///
    /// # Errors
    /// A store error, classified as for the store operations.
    fn count_exact(&self) -> impl Future<Output = Result<StoreCount>> + Send {
        self.gauges()
    }

    /// Records holding a sealed response ([`crate::seal`]), per key id (16 hex digits), in
    /// key id order, expired ones not yet purged included: one scan, for `idemgate stats`
    /// (an old key may be removed from `encryption_key_files` once none remain under its
    /// id). `None` where the store cannot count them (the default).
    ///
    /// # Errors
    /// A store error.
    fn count_sealed(&self) -> impl Future<Output = Result<Option<Vec<(String, u64)>>>> + Send {
        std::future::ready(Ok(None))
    }

    /// Counts the records a purge would delete now (past their `expires_at`), deleting
    /// nothing; at most `limit` are counted. `None` where the store expires records itself
    /// (Redis).
    ///
    /// # Errors
    /// A store error.
    fn count_expired(&self, limit: NonZeroU32) -> impl Future<Output = Result<Option<u64>>> + Send;

    /// Reads what the store can lose when its process, host or primary fails
    /// ([`Durability`]): read at start-up and every `gauges_interval`, logged when it changes.
    /// By default [`DurabilityLevel::Unknown`]: a store that cannot read its server's
    /// settings (a key service's store) says so.
    ///
    /// # Errors
    /// A store error, classified as for the store operations.
    fn durability(&self) -> impl Future<Output = Result<Durability>> + Send {
        std::future::ready(Ok(Durability::new(
            DurabilityLevel::Unknown,
            "the store does not report what a failure can lose",
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(created: i64, expires: i64, lease: Option<i64>) -> RecordFacts {
        RecordFacts {
            created_at: Some(created),
            expires_at: Some(expires),
            lease_expires_at: lease,
            body_bytes: Some(10),
        }
    }

    #[test]
    fn counting_sorts_states_expired_and_stuck() {
        let mut g = StoreCount {
            now: 1_000,
            expired: Some(0),
            body_bytes: Some(0),
            ..StoreCount::default()
        };
        g.count(Some(RecordState::Completed), facts(100, 500, None)); // expired
        g.count(Some(RecordState::InProgress), facts(200, 5_000, Some(900))); // stuck
        g.count(
            Some(RecordState::InProgress),
            facts(300, 5_000, Some(2_000)),
        ); // held
        g.count(Some(RecordState::InProgress), facts(400, 900, Some(800))); // expired, not stuck
        g.count(Some(RecordState::Failed), facts(500, 5_000, None));
        assert_eq!((g.in_progress, g.completed, g.failed), (3, 1, 1));
        assert_eq!(g.records(), 5);
        assert_eq!(g.expired, Some(2));
        assert_eq!(g.stuck_in_progress, 1);
        assert_eq!(g.body_bytes, Some(50));
        assert_eq!(g.oldest_created_at, Some(100));
        assert!((g.oldest_age_seconds() - 0.9).abs() < 1e-9);
    }

    #[test]
    fn a_store_that_cannot_tell_keeps_none() {
        let mut g = StoreCount {
            now: 1_000,
            ..StoreCount::default()
        };
        g.count(Some(RecordState::Completed), facts(100, 500, None));
        g.count(Some(RecordState::Failed), facts(700, 5_000, None));
        assert_eq!((g.expired, g.body_bytes), (None, None));
        // Past its expiry, the record is absent on a store that expires records itself.
        assert_eq!(
            (g.completed, g.failed, g.oldest_created_at),
            (0, 1, Some(700))
        );
        assert_eq!(StoreCount::default().oldest_age_seconds(), 0.0);
    }
}
