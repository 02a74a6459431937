//! An operator's commands for a stuck key (docs/operations.md, "A stuck key"), each under
//! the premise the runbook asks the operator to establish first, and each at most once a
//! run.
//!
//! - `idemgate release --force`: the key did not run and its attempt can no longer be
//!   running: no execution of the key, and no holder that may still forward or write its
//!   outcome. The record
//!   goes (an event the waiters see as a release); the next request runs it, once.
//! - `idemgate resolve`: the key ran; the operator records its answer. One take-over
//!   (fence + 1, a new token) and a completion under it, by a process without a journal
//!   (the CLI), so a failover may lose it; the holder's late outcome is refused
//!   (`LeaseLost`) by the fence.
//!
//! Both act only on an `in_progress` record whose lease lapsed (`release` refuses a live
//! attempt's record, `resolve` one that is not stuck).

use crate::state::{Phase, Record, State, Stored};
use crate::step::Action;
use crate::Protocol;

/// The `in_progress` record with a lapsed lease an operator may act on.
fn stuck(s: &State) -> Option<Record> {
    s.primary
        .filter(|r| r.state == Stored::InProgress && s.now >= r.lease_end)
}

/// Whether the attempt holding `record`'s lease is not over: it may still forward, or its
/// outcome write is still pending. (An operator release while the write is pending is not
/// safe: a failover may bring the record back from that gateway's journal, live, and the
/// pending release then frees the key for another run. The runbook's window bounds the
/// forward only; docs/operations.md says to wait for the write too.)
fn may_run(s: &State, record: &Record) -> bool {
    s.attempts.iter().any(|a| match a.phase {
        Phase::Held { lease, .. } | Phase::Outcome { lease, .. } => {
            lease.fence == record.fence && lease.token == record.token
        }
        _ => false,
    })
}

/// The operator's commands enabled in `s`.
pub(crate) fn actions(m: &Protocol, s: &State, out: &mut Vec<Action>) {
    if !m.operator || s.operated {
        return;
    }
    let Some(record) = stuck(s) else {
        return;
    };
    if s.runs == 0 && !may_run(s, &record) {
        out.push(Action::OperatorRelease);
    }
    if s.runs > 0 {
        out.push(Action::Resolve);
    }
}

/// `release --force`: the stuck record deleted.
pub(crate) fn release(m: &Protocol, s: &mut State) {
    s.primary = None;
    s.releases += u8::from(m.waits);
    s.operated = true;
}

/// `resolve`: a take-over and a completion with the answer the upstream gave: the outcome
/// a client was answered from the store already, if one landed, else the last execution's.
pub(crate) fn resolve(s: &mut State) {
    let Some(record) = stuck(s) else {
        unreachable!("resolve acts on a stuck key")
    };
    let answer = s.landed.unwrap_or(s.runs);
    s.tokens += 1;
    s.primary = Some(Record {
        state: Stored::Completed(answer),
        fence: record.fence + 1,
        token: s.tokens,
        lease_end: s.now,
    });
    s.landed.get_or_insert(answer);
    s.landed_in_gate |= s.gate_closed;
    s.operated = true;
}
