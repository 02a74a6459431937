//! The decision function: given the stored record, the request's fingerprint and the time,
//! what happens. Pure and exhaustively tested. It lives here only: stores offer
//! compare-and-set primitives ([`crate::store`]) and the lifecycle ([`crate::lifecycle`])
//! applies the verdicts through them.
//!
//! ```
//! use idemgate_core::engine::{decide, Decision};
//! use idemgate_core::fingerprint::{Fingerprint, CURRENT_VERSION};
//! use idemgate_core::lifecycle::RoutePlan;
//!
//! let fp = Fingerprint { version: CURRENT_VERSION, digest: [7; 32] };
//! assert_eq!(decide(None, &fp, 0, &RoutePlan::default()), Decision::Insert);
//! ```

use crate::fingerprint::Fingerprint;
use crate::lifecycle::RoutePlan;
use crate::record::{IdempotencyRecord, RecordState, UnixMillis};

/// What an `in_progress` record whose lease lapsed before its outcome was written means.
///
/// The holder crashed or lost the store after the request may have been forwarded, so the
/// operation may have run: the honest answer is "unknown" (DESIGN.md, contract table).
///
/// Spelled `"unknown"`, `"takeover"` or `"fail"` in configuration.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LeaseExpiredPolicy {
    /// Answer `outcome-unknown` (`500`); the record is kept, and a late outcome written by
    /// the holder (its fence still valid) is replayed from then on. The default.
    #[default]
    Unknown,
    /// Re-acquire with a higher fence and forward again (marked as a takeover), for
    /// operations that are safe to repeat, upstreams that dedupe on the forwarded key, and
    /// services that complete the key inside their own business transaction.
    Takeover,
    /// Answer as if the attempt failed (`previous-attempt-failed`).
    Fail,
}

/// The verdict for one request. The first two mean "this request runs"; the rest are answers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Decision {
    /// No live record (none, or expired by TTL): create one `in_progress`.
    Insert,
    /// Take over an `in_progress` record with an expired lease under
    /// [`LeaseExpiredPolicy::Takeover`] (or a `failed` one when the policy allows retries):
    /// fence + 1, new lease.
    Takeover,
    /// Same fingerprint, `in_progress`, lease lapsed under [`LeaseExpiredPolicy::Unknown`]:
    /// the operation may have run and its outcome was never recorded.
    OutcomeUnknown,
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

/// Decides what a request with fingerprint `fp` does, given the stored `record` at `now`.
///
/// Order (DESIGN.md contract table): an absent or expired record → `Insert`; a different
/// fingerprint → `Mismatch` (checked before the state); then by state.
pub fn decide(
    record: Option<&IdempotencyRecord>,
    fp: &Fingerprint,
    now: UnixMillis,
    policy: &RoutePlan,
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
                    LeaseExpiredPolicy::Unknown => Decision::OutcomeUnknown,
                    LeaseExpiredPolicy::Takeover => Decision::Takeover,
                    LeaseExpiredPolicy::Fail => Decision::PreviousFailed,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
