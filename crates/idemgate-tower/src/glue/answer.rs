//! The answer to a request the lifecycle settled without running it: a replay of the stored
//! response, or the problem answer for the reason.

use http::{Response, StatusCode};
use idemgate_core::lifecycle::{hash_key, principal_hash, Answer};

use super::Covered;
use crate::body::BoxBody;
use crate::policy::RoutePolicy;
use crate::rejection::IdempotencyRejection;
use crate::replay::replay;

/// The response for a lifecycle answer that runs nothing: a replay, or a problem answer.
pub(crate) fn answer_for(
    covered: &mut Covered,
    answer: Answer,
) -> (&'static str, Response<BoxBody>) {
    covered.ticket.settle(&answer);
    match answer {
        Answer::Replay(stored) => match replay(&stored) {
            Ok(r) => {
                covered.meters.count("replayed");
                ("replayed", r)
            }
            Err(e) => {
                tracing::error!(route = %covered.label(), key = %hash_key(&covered.scope), principal = %principal_hash(&covered.scope), error = %e, "stored response cannot be replayed");
                covered.reject(IdempotencyRejection::RecordCorrupt)
            }
        },
        other => covered.reject(rejection_for(other, &covered.route)),
    }
}

/// The problem answer for a lifecycle answer other than a replay.
fn rejection_for(answer: Answer, rp: &RoutePolicy) -> IdempotencyRejection {
    match answer {
        Answer::NotReplayable { status, detail } => IdempotencyRejection::ResponseNotKept {
            original_status: status,
            detail,
        },
        Answer::InFlight { retry_after_ms } => IdempotencyRejection::RequestInFlight {
            retry_after_secs: retry_after_ms
                .max(rp.in_flight_retry_after.as_millis() as u64)
                .div_ceil(1000)
                .max(1),
        },
        Answer::Mismatch => IdempotencyRejection::FingerprintMismatch {
            status: rp.mismatch_status,
        },
        Answer::PreviousFailed => IdempotencyRejection::PreviousAttemptFailed,
        Answer::Released {
            status,
            retry_after_ms,
        } => IdempotencyRejection::PreviousAttemptReleased {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
            retry_after_secs: retry_after_ms.map(|ms| ms.div_ceil(1000)),
        },
        Answer::OutcomeUnknown => IdempotencyRejection::OutcomeUnknown,
        Answer::Corrupt | Answer::Replay(_) => IdempotencyRejection::RecordCorrupt,
        Answer::Unavailable(_) | Answer::Overloaded => IdempotencyRejection::StoreUnavailable,
    }
}
