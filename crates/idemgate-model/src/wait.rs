//! Waiters (`idemgate_core::lifecycle::wait`): a duplicate of an in-flight key, on a route
//! with `on_in_flight = "wait"`, waits for its outcome instead of answering `409`.
//!
//! Its watcher reads the record (`peek`, `get`) and the waiter answers what a retry would
//! get then: a replay of a settled record (not one held while a failover is handled:
//! `ReplayHeld` is a read error, and the watcher reads again); for a lapsed lease,
//! `outcome-unknown`, or a take-over on a route that opts in. A record released by its
//! holder (known from the release's event) is acquired through the same insert as a new
//! key, once per wait; one that vanished without a release is answered `409`, never run by
//! a waiter. A waiter may stop at any time (`max_wait`, its client gone) with `409`.

use crate::state::{Answer, Attempt, Phase, State, Stored};
use crate::step::{answer, phase};
use crate::Protocol;

/// Whether a replay is held (`ReplayHeld`): the gate is closed and the outcome landed
/// after the failover.
pub(crate) fn held(m: &Protocol, s: &State) -> bool {
    s.gate_closed && s.landed_in_gate && !m.bugs.replays_not_held
}

/// What a waiter's read of the record leads to, when it is news to it; `None` while it
/// waits on (the lease live, the replay held).
pub(crate) fn news(m: &Protocol, s: &State, a: &Attempt) -> Option<Result<Answer, Phase>> {
    let Phase::Waiting { releases, tried } = a.phase else {
        unreachable!("a waiter's phase")
    };
    let Some(record) = s.primary else {
        // Released (its event seen) and not yet tried: acquire, as a new key.
        return Some(match s.releases != releases && !tried {
            true => Err(Phase::WaiterBegin { tried: true }),
            false => Ok(Answer::InFlight),
        });
    };
    match record.state {
        Stored::Completed(_) if held(m, s) => None,
        Stored::Completed(n) => Some(Ok(Answer::Replay(n))),
        Stored::InProgress if s.now < record.lease_end => None,
        Stored::InProgress if m.takeover || m.bugs.takeover_by_default => {
            Some(Err(Phase::WaiterBegin { tried }))
        }
        Stored::InProgress => Some(Ok(Answer::OutcomeUnknown)),
    }
}

/// The watcher's read reaches the waiter.
pub(crate) fn watch(m: &Protocol, s: &mut State, attempt: u8) {
    let a = s.attempts[usize::from(attempt)];
    match news(m, s, &a) {
        Some(Ok(answered)) => answer(s, attempt, answered),
        Some(Err(next)) => phase(s, attempt, next),
        None => unreachable!("a watch is news"),
    }
}
