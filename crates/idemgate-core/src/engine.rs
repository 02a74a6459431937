//! The decision function: given the stored record, the request's fingerprint and the time,
//! what happens. Pure and exhaustively tested; stores apply its `Insert`/`Takeover` verdicts
//! atomically (the memory and SQLite stores call [`apply_acquire`] inside their critical
//! section; SQL and Lua stores implement the same rules, checked by the conformance suite).
//!
//! ```
//! use idemgate_core::engine::{decide, Decision, DecisionPolicy};
//! use idemgate_core::fingerprint::{Fingerprint, CURRENT_VERSION};
//!
//! let fp = Fingerprint { version: CURRENT_VERSION, digest: [7; 32] };
//! assert_eq!(decide(None, &fp, 0, &DecisionPolicy::default()), Decision::Insert);
//! ```

use std::time::Duration;

use crate::fingerprint::Fingerprint;
use crate::record::{IdempotencyRecord, Lease, RecordState, UnixMillis};
use crate::store::{AcquireOutcome, AcquireRequest};

/// What to do with an `in_progress` record whose lease expired (its holder died).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum LeaseExpiredPolicy {
    /// Re-acquire with a higher fence and forward again (default).
    #[default]
    Takeover,
    /// Answer as if the attempt failed.
    Fail,
}

/// The per-route knobs of the decision.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct DecisionPolicy {
    /// What an expired lease means. Defaults to [`LeaseExpiredPolicy::Takeover`].
    pub lease_expired: LeaseExpiredPolicy,
    /// Whether a retry of a `failed` record (same fingerprint) may run again. Defaults to false.
    pub retry_failed: bool,
    /// How long a record whose lease is missing counts as in progress after `created_at`.
    /// Defaults to 60 s.
    pub max_lease: Duration,
}

impl Default for DecisionPolicy {
    fn default() -> Self {
        Self {
            lease_expired: LeaseExpiredPolicy::Takeover,
            retry_failed: false,
            max_lease: Duration::from_secs(60),
        }
    }
}

/// The verdict for one request. The first two mean "this request runs"; the rest are answers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Decision {
    /// No live record (none, or expired by TTL): create one `in_progress`.
    Insert,
    /// Take over an `in_progress` record with an expired lease (or a `failed` one when the
    /// policy allows retries): fence + 1, new lease.
    Takeover,
    /// Same fingerprint, `completed`: replay the stored response.
    Replay,
    /// Same fingerprint, `completed` but the response was not kept (streamed or too large).
    NotReplayable,
    /// Same fingerprint, first request still running: `409` with `Retry-After`.
    InFlight {
        /// Suggested wait before retrying, in ms (at most 1000).
        retry_after_ms: u64,
    },
    /// Same key, different fingerprint, whatever the state: `422` (or `400`); record untouched.
    Mismatch,
    /// Same fingerprint, the attempt failed (or its lease expired under `Fail`): `500`.
    PreviousFailed,
}

impl Decision {
    /// True for the verdicts under which the request runs.
    pub fn runs(self) -> bool {
        matches!(self, Self::Insert | Self::Takeover)
    }
}

/// Decides what a request with fingerprint `fp` does, given the stored `record` at `now`.
///
/// Order (DESIGN.md contract table): an absent or expired record → `Insert`; a different
/// fingerprint → `Mismatch` (checked before the state); then by state.
pub fn decide(
    record: Option<&IdempotencyRecord>,
    fp: &Fingerprint,
    now: UnixMillis,
    policy: &DecisionPolicy,
) -> Decision {
    let Some(record) = record.filter(|r| now < r.expires_at) else {
        return Decision::Insert;
    };
    if record.fingerprint != *fp {
        return Decision::Mismatch;
    }
    match record.state {
        RecordState::Completed => match &record.response {
            Some(r) if r.replayable => Decision::Replay,
            _ => Decision::NotReplayable,
        },
        RecordState::Failed if policy.retry_failed => Decision::Takeover,
        RecordState::Failed => Decision::PreviousFailed,
        RecordState::InProgress => {
            let lease_end = record.lease_expires_at.unwrap_or_else(|| {
                record
                    .created_at
                    .saturating_add(policy.max_lease.as_millis() as i64)
            });
            if now < lease_end {
                Decision::InFlight {
                    retry_after_ms: ((lease_end - now) as u64).min(1000),
                }
            } else {
                match policy.lease_expired {
                    LeaseExpiredPolicy::Takeover => Decision::Takeover,
                    LeaseExpiredPolicy::Fail => Decision::PreviousFailed,
                }
            }
        }
    }
}

/// The acquire step for stores that can run Rust inside their atomic section: given the
/// current row (if any) and `now`, returns the row to write (if any) and the outcome.
pub fn apply_acquire(
    current: Option<IdempotencyRecord>,
    req: &AcquireRequest,
    now: UnixMillis,
) -> (Option<IdempotencyRecord>, AcquireOutcome) {
    let decision = decide(current.as_ref(), &req.fingerprint, now, &req.policy);
    let lease_expires_at = now.saturating_add(req.lease_ttl.as_millis() as i64);
    let record_expires_at = now
        .saturating_add(req.record_ttl.as_millis() as i64)
        .max(lease_expires_at);
    // A record never expires under a live lease: expiry would let a retry run while the
    // holder still works. Takeover and renewal push `expires_at` to at least the lease's end.
    let (fence, created_at, expires_at) = match (decision, &current) {
        (Decision::Insert, None) => (1, now, record_expires_at),
        (Decision::Insert, Some(old)) => (old.fence + 1, now, record_expires_at),
        (Decision::Takeover, Some(old)) => (
            old.fence + 1,
            old.created_at,
            old.expires_at.max(lease_expires_at),
        ),
        (_, Some(old)) => {
            return (
                None,
                AcquireOutcome::Existing {
                    record: old.clone(),
                    now,
                },
            )
        }
        (_, None) => unreachable!("decide() answers Insert when there is no record"),
    };
    let row = IdempotencyRecord {
        key: req.key.clone(),
        fingerprint: req.fingerprint,
        state: RecordState::InProgress,
        fence,
        lease_token: Some(req.token),
        lease_expires_at: Some(lease_expires_at),
        created_at,
        completed_at: None,
        expires_at,
        response: None,
    };
    let lease = Lease {
        key: req.key.clone(),
        fence,
        token: req.token,
        expires_at: lease_expires_at,
    };
    (
        Some(row),
        AcquireOutcome::Acquired {
            lease,
            takeover: decision == Decision::Takeover,
        },
    )
}

#[cfg(test)]
mod tests;
