//! The counters idemgate exports, described once: name, HELP text and every series (label
//! values) a front door can emit, so that each front door registers all of them at 0 at
//! start-up ([`Series::register`]).
//!
//! A counter that appears only at its first increase hides that increase from Prometheus:
//! `increase(...)` needs a sample before the event, so an alert on the first corrupt record
//! or the first unknown outcome of a process would never fire. Gauges are not registered
//! here: a gauge exported before it has a value would claim one (a purge-success timestamp
//! of 0 reads as "never purged").
//!
//! This module holds the counters of the core [`Lifecycle`](crate::Lifecycle)
//! ([`LIFECYCLE_COUNTERS`], [`lifecycle_series`]); the tower layer, the gateway and the key
//! service add their own.
//!
//! ```
//! use idemgate_core::counters::{lifecycle_series, LIFECYCLE_COUNTERS};
//!
//! let series = lifecycle_series("sqlite");
//! for counter in LIFECYCLE_COUNTERS {
//!     assert!(series.iter().any(|s| s.name == counter.name), "{}", counter.name);
//! }
//! // Without a recorder installed this does nothing; with one, every series reads 0.
//! for s in &series {
//!     s.register();
//! }
//! ```

/// A counter: its name and HELP text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterSpec {
    /// The metric name (ends in `_total`).
    pub name: &'static str,
    /// The HELP text.
    pub help: &'static str,
}

impl CounterSpec {
    /// Describes the counter (its HELP text) to the installed recorder.
    pub fn describe(&self) {
        metrics::describe_counter!(self.name, self.help);
    }
}

/// One series of a counter: its name and label values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Series {
    /// The metric name.
    pub name: &'static str,
    /// The labels, in the order the code emits them.
    pub labels: Vec<(&'static str, String)>,
}

impl Series {
    /// The series of `name` without labels.
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            labels: Vec::new(),
        }
    }

    /// This series with one more label.
    #[must_use]
    pub fn with(mut self, label: &'static str, value: impl Into<String>) -> Self {
        self.labels.push((label, value.into()));
        self
    }

    /// One series per value of `label`, each this series with that label added.
    pub fn each(&self, label: &'static str, values: &[&str]) -> Vec<Self> {
        values
            .iter()
            .map(|v| self.clone().with(label, *v))
            .collect()
    }

    /// Registers the series with the installed recorder: exported at 0 until it moves. A
    /// series already registered keeps its value.
    pub fn register(&self) {
        metrics::counter!(self.name, &self.labels).increment(0);
    }
}

/// Retries answered `outcome-unknown`.
pub const OUTCOME_UNKNOWN: &str = "idempotency_outcome_unknown_total";
/// Stored records that failed validation, by `backend`.
pub const RECORD_CORRUPT: &str = "idempotency_record_corrupt_total";
/// Holders that lost their lease.
pub const LEASE_LOST: &str = "idempotency_lease_lost_total";
/// Expired leases taken over.
pub const TAKEOVERS: &str = "idempotency_takeovers_total";
/// Take-overs whose forward did nothing: the record kept, to lapse and be taken over again.
pub const TAKEOVER_RELEASES_KEPT: &str = "idempotency_takeover_releases_kept_total";
/// Outcome writes that never landed, by `reason` ([`ABANDONED_REASONS`]).
pub const OUTCOME_ABANDONED: &str = "idempotency_outcome_abandoned_total";

/// Every value of the `reason` label of [`OUTCOME_ABANDONED`].
pub const ABANDONED_REASONS: [&str; 2] = ["ttl", "shutdown"];
/// Waits of duplicates on in-flight keys, by `outcome` ([`WAIT_OUTCOMES`]).
pub const WAITS: &str = "idempotency_waits_total";
/// Every value of the `outcome` label of [`WAITS`]: the waiter ran the released key, got
/// the replay, the released status, another answer (failed, unknown, not kept, ...), `409`
/// when the wait ended (or the record vanished), was refused at once (`max_waiters`), or
/// its client left.
pub const WAIT_OUTCOMES: [&str; 7] = [
    "run",
    "replay",
    "released",
    "answered",
    "in_flight",
    "refused",
    "left",
];

/// The counters of the core lifecycle.
pub const LIFECYCLE_COUNTERS: [CounterSpec; 9] = [
    CounterSpec {
        name: TAKEOVERS,
        help: "Expired leases taken over by a retry (routes with lease_expired = \"takeover\"); the operation runs again.",
    },
    CounterSpec {
        name: TAKEOVER_RELEASES_KEPT,
        help: "Take-overs whose forward did nothing (a release status): the record is kept, to lapse and be taken over again, since the holder before may have run.",
    },
    CounterSpec {
        name: LEASE_LOST,
        help: "Holders that lost their lease while their operation ran or before its outcome landed.",
    },
    CounterSpec {
        name: OUTCOME_UNKNOWN,
        help: "Retries answered outcome-unknown: a lease lapsed before its outcome was written.",
    },
    CounterSpec {
        name: RECORD_CORRUPT,
        help: "Stored records that failed validation and were not replayed, by backend.",
    },
    CounterSpec {
        name: "idempotency_outcome_retries_total",
        help: "Outcome writes retried after a store failure.",
    },
    CounterSpec {
        name: OUTCOME_ABANDONED,
        help: "Outcome writes that never landed, by reason (ttl, shutdown).",
    },
    CounterSpec {
        name: "idempotency_reclaimed_total",
        help: "Records of inserts whose answer was lost, released again.",
    },
    CounterSpec {
        name: WAITS,
        help: "Waits of duplicates on in-flight keys (on_in_flight = \"wait\"), by outcome.",
    },
];

/// Every series of [`LIFECYCLE_COUNTERS`] for a lifecycle on a store whose
/// [`backend`](crate::IdempotencyStore::backend) is `backend`.
pub fn lifecycle_series(backend: &'static str) -> Vec<Series> {
    let mut series = Vec::new();
    for counter in LIFECYCLE_COUNTERS {
        let s = Series::new(counter.name);
        match counter.name {
            RECORD_CORRUPT => series.push(s.with("backend", backend)),
            OUTCOME_ABANDONED => series.extend(s.each("reason", &ABANDONED_REASONS)),
            WAITS => series.extend(s.each("outcome", &WAIT_OUTCOMES)),
            _ => series.push(s),
        }
    }
    series
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lifecycle_counter_has_its_series() {
        let series = lifecycle_series("memory");
        assert_eq!(series.len(), LIFECYCLE_COUNTERS.len() + 7, "{series:?}");
        let corrupt = Series::new(RECORD_CORRUPT).with("backend", "memory");
        assert!(series.contains(&corrupt));
        for reason in ABANDONED_REASONS {
            let abandoned = Series::new(OUTCOME_ABANDONED).with("reason", reason);
            assert!(series.contains(&abandoned), "{reason}");
        }
        for counter in LIFECYCLE_COUNTERS {
            assert!(counter.name.ends_with("_total"), "{}", counter.name);
        }
    }
}
