//! The actions and what each does: a client's send or departure, one step of a gateway's
//! lifecycle (named as in `idemgate_core::lifecycle`), a store primitive, a crash, a restart,
//! replication, a failover and a journal's restore.

use crate::{failover, operator, wait};
use crate::state::{Answer, Attempt, Entry, Lease, Phase, Record, State, Stored, Write};
use crate::Protocol;

/// One step of the system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A client sends the request (or retries it) to a gateway.
    Send {
        /// The client's index.
        client: u8,
        /// The gateway's index.
        gateway: u8,
    },
    /// A client stops waiting (a timeout, a disconnect); its request goes on.
    Leave {
        /// The client's index.
        client: u8,
    },
    /// `Lifecycle::begin`: `insert_or_get` and the decision; with `lost`, an insert lands and
    /// its answer is lost.
    Begin {
        /// The attempt's index in `State::attempts`.
        attempt: u8,
        /// The call lands and its answer is lost.
        lost: bool,
    },
    /// `take_over`: compare-and-set on the record read.
    TakeOver {
        /// The attempt's index in `State::attempts`.
        attempt: u8,
    },
    /// The holder renews its lease (`renew`, every `lease_ttl / 3`).
    Renew {
        /// The attempt's index in `State::attempts`.
        attempt: u8,
    },
    /// The forward: the upstream runs the operation, or answers "nothing done".
    Forward {
        /// The attempt's index in `State::attempts`.
        attempt: u8,
        /// The upstream answered "nothing done".
        nothing_done: bool,
    },
    /// `PendingOutcome::retry`: the outcome write; with `lost`, it lands and its answer is
    /// lost (so it is retried).
    WriteOutcome {
        /// The attempt's index in `State::attempts`.
        attempt: u8,
        /// The call lands and its answer is lost.
        lost: bool,
    },
    /// `reclaim`: the release of what an insert with a lost answer may have left.
    Reclaim {
        /// The attempt's index in `State::attempts`.
        attempt: u8,
    },
    /// The store's clock advances.
    Tick,
    /// The standby catches up with the primary.
    Replicate,
    /// The standby becomes the primary, losing what it had not received.
    Failover,
    /// A gateway process dies: its requests vanish, their clients see the connection drop.
    Crash {
        /// The gateway's index.
        gateway: u8,
    },
    /// A gateway process starts again (a new run of its journal).
    Restart {
        /// The gateway's index.
        gateway: u8,
    },
    /// A gateway writes its journal's entries back after a failover.
    Restore {
        /// The gateway's index.
        gateway: u8,
    },
    /// A waiter's watcher reads the record and it is news (`watcher::watch`).
    Watch {
        /// The attempt's index in `State::attempts`.
        attempt: u8,
    },
    /// A waiter stops: `max_wait` passed, or its client left (`409`).
    GiveUp {
        /// The attempt's index in `State::attempts`.
        attempt: u8,
    },
    /// `idemgate release --force` of a stuck key that did not run.
    OperatorRelease,
    /// `idemgate resolve` of a stuck key that ran, with its answer.
    Resolve,
}

/// Every action enabled in `s`.
pub(crate) fn actions(m: &Protocol, s: &State, out: &mut Vec<Action>) {
    for (c, &(left, waiting)) in s.clients.iter().enumerate() {
        let client = c as u8;
        if waiting {
            out.push(Action::Leave { client });
        } else if left > 0 {
            for (g, gw) in s.gateways.iter().enumerate() {
                if !gw.down {
                    let gateway = g as u8;
                    out.push(Action::Send { client, gateway });
                }
            }
        }
    }
    for (i, a) in s.attempts.iter().enumerate() {
        attempt_actions(m, s, i as u8, a, out);
    }
    if s.now < m.max_time {
        out.push(Action::Tick);
    }
    if s.standby != s.primary {
        out.push(Action::Replicate);
    }
    operator::actions(m, s, out);
    if s.failovers < m.max_failovers {
        out.push(Action::Failover);
    }
    for (g, gw) in s.gateways.iter().enumerate() {
        let gateway = g as u8;
        match gw.down {
            false if s.crashes < m.max_crashes => out.push(Action::Crash { gateway }),
            true => out.push(Action::Restart { gateway }),
            false => {}
        }
        if s.gate_closed && !gw.down && !gw.restored {
            out.push(Action::Restore { gateway });
        }
    }
}

fn attempt_actions(m: &Protocol, s: &State, attempt: u8, a: &Attempt, out: &mut Vec<Action>) {
    let lost = [false, true];
    let lost = &lost[..if m.lost_answers { 2 } else { 1 }];
    match a.phase {
        Phase::Begin | Phase::WaiterBegin { .. } => {
            out.extend(lost.iter().map(|&lost| Action::Begin { attempt, lost }));
        }
        Phase::Waiting { .. } => {
            if wait::news(m, s, a).is_some() {
                out.push(Action::Watch { attempt });
            }
            out.push(Action::GiveUp { attempt });
        }
        Phase::TakeOver(_) => out.push(Action::TakeOver { attempt }),
        Phase::Held { .. } => {
            out.push(Action::Renew { attempt });
            for nothing_done in [false, true] {
                out.push(Action::Forward {
                    attempt,
                    nothing_done,
                });
            }
        }
        Phase::Outcome { .. } => {
            out.extend(
                lost.iter()
                    .map(|&lost| Action::WriteOutcome { attempt, lost }),
            );
        }
        Phase::Reclaim(_) => out.push(Action::Reclaim { attempt }),
    }
}

/// The state after `action` in `last`.
pub(crate) fn next(m: &Protocol, last: &State, action: Action) -> Option<State> {
    let mut s = last.clone();
    match action {
        Action::Send { client, gateway } => {
            let c = &mut s.clients[usize::from(client)];
            (c.0, c.1) = (c.0 - 1, true);
            s.attempts.push(Attempt {
                gateway,
                client: Some(client),
                phase: Phase::Begin,
            });
        }
        Action::Leave { client } => {
            s.clients[usize::from(client)].1 = false;
            for a in s.attempts.iter_mut().filter(|a| a.client == Some(client)) {
                a.client = None;
            }
        }
        Action::Begin { attempt, lost } => begin(m, &mut s, attempt, lost),
        Action::TakeOver { attempt } => take_over(m, &mut s, attempt),
        Action::Renew { attempt } => renew(m, &mut s, attempt),
        Action::Forward {
            attempt,
            nothing_done,
        } => forward(m, &mut s, attempt, nothing_done),
        Action::WriteOutcome { attempt, lost } => write_outcome(m, &mut s, attempt, lost),
        Action::Reclaim { attempt } => reclaim(m, &mut s, attempt),
        Action::Tick => s.now += 1,
        Action::Replicate => failover::replicate(&mut s),
        Action::Failover => failover::failover(m, &mut s),
        Action::Crash { gateway } => crash(&mut s, gateway),
        Action::Restart { gateway } => {
            let gw = &mut s.gateways[usize::from(gateway)];
            gw.down = false;
            for (_, this_run) in &mut gw.journal {
                *this_run = false;
            }
        }
        Action::Restore { gateway } => failover::restore(m, &mut s, gateway),
        Action::Watch { attempt } => wait::watch(m, &mut s, attempt),
        Action::GiveUp { attempt } => answer(&mut s, attempt, Answer::InFlight),
        Action::OperatorRelease => operator::release(m, &mut s),
        Action::Resolve => operator::resolve(&mut s),
    }
    // Two states alike but for the order of attempts, the names of clients, gateways and
    // tokens are one.
    crate::canonical::canonical(&mut s);
    Some(s)
}

/// Ends `attempt` with `answer` to its client, if the client still waits.
pub(crate) fn answer(s: &mut State, attempt: u8, answer: Answer) {
    let a = s.attempts.remove(usize::from(attempt));
    if let Some(c) = a.client {
        s.clients[usize::from(c)].1 = false;
        match answer {
            // The first outcome that landed never changes once set: checked as answered.
            Answer::Replay(n) => {
                s.answered.replay = true;
                s.answered.wrong_replay |= Some(n) != s.landed;
                s.answered.waiter_replay |= matches!(a.phase, Phase::Waiting { .. });
            }
            Answer::OutcomeUnknown => s.answered.unknown = true,
            _ => {}
        }
    }
}

pub(crate) fn phase(s: &mut State, attempt: u8, phase: Phase) {
    s.attempts[usize::from(attempt)].phase = phase;
}

/// A new lease on a fresh `in_progress` record of `fence`, journaled before it is handed out.
fn acquire(m: &Protocol, s: &mut State, fence: u8) -> (Record, Lease) {
    s.tokens += 1;
    let record = Record {
        state: Stored::InProgress,
        fence,
        token: s.tokens,
        lease_end: s.now + m.lease_ttl,
    };
    s.primary = Some(record);
    (
        record,
        Lease {
            fence,
            token: s.tokens,
        },
    )
}

fn journal(m: &Protocol, s: &mut State, attempt: u8, record: Record) {
    if m.journal {
        let g = usize::from(s.attempts[usize::from(attempt)].gateway);
        let entry = Entry {
            record,
            released: false,
        };
        s.gateways[g].journal.push((entry, true));
    }
}

/// `Lifecycle::begin`: `insert_or_get`, then `decide` on what it found.
fn begin(m: &Protocol, s: &mut State, attempt: u8, lost: bool) {
    let tried = match s.attempts[usize::from(attempt)].phase {
        Phase::WaiterBegin { tried } => Some(tried),
        _ => None,
    };
    let Some(record) = s.primary else {
        if s.gate_closed {
            // New keys are refused until every gateway restored its journal.
            return answer(s, attempt, Answer::Unavailable);
        }
        let (record, lease) = acquire(m, s, 1);
        if lost {
            // The store inserted; the gateway saw an error and answers 503 after
            // following the insert up.
            return phase(s, attempt, Phase::Reclaim(lease));
        }
        journal(m, s, attempt, record);
        s.answered.waiter_acquired |= tried.is_some();
        return phase(
            s,
            attempt,
            Phase::Held {
                lease,
                marked: false,
            },
        );
    };
    match record.state {
        // `ReplayHeld`: another gateway's restore may still write over it.
        Stored::Completed(_) if wait::held(m, s) => answer(s, attempt, Answer::Unavailable),
        Stored::Completed(n) => answer(s, attempt, Answer::Replay(n)),
        Stored::InProgress if s.now < record.lease_end && m.waits => {
            let releases = s.releases;
            let tried = tried.unwrap_or(false);
            phase(s, attempt, Phase::Waiting { releases, tried });
        }
        Stored::InProgress if s.now < record.lease_end => answer(s, attempt, Answer::InFlight),
        Stored::InProgress if m.takeover || m.bugs.takeover_by_default => {
            phase(s, attempt, Phase::TakeOver(record));
        }
        Stored::InProgress => answer(s, attempt, Answer::OutcomeUnknown),
    }
}

/// `take_over`: compare-and-set on what `begin` read; fence + 1, a new lease.
fn take_over(m: &Protocol, s: &mut State, attempt: u8) {
    let Phase::TakeOver(seen) = s.attempts[usize::from(attempt)].phase else {
        unreachable!("a take-over's phase")
    };
    if s.gate_closed {
        return answer(s, attempt, Answer::Unavailable);
    }
    if s.primary != Some(seen) {
        // Changed since read: another holder took it, or it completed.
        return answer(s, attempt, Answer::InFlight);
    }
    let (record, lease) = acquire(m, s, seen.fence + 1);
    journal(m, s, attempt, record);
    phase(
        s,
        attempt,
        Phase::Held {
            lease,
            marked: true,
        },
    );
}

/// `renew`: the lease extended if the record still has its fence and token.
fn renew(m: &Protocol, s: &mut State, attempt: u8) {
    let Phase::Held { lease, .. } = s.attempts[usize::from(attempt)].phase else {
        unreachable!("a holder's phase")
    };
    let now = s.now;
    if let Some(r) = s.primary.as_mut().filter(|r| r.state == Stored::InProgress) {
        let ours = r.fence == lease.fence && r.token == lease.token;
        if ours || m.bugs.renew_unfenced {
            r.lease_end = now + m.lease_ttl;
            s.stale_write |= !ours;
        }
    }
    // LeaseLost otherwise: nothing changes, the holder goes on to its outcome write.
}

/// The forward: an execution (its response is the execution's number), or "nothing done".
fn forward(m: &Protocol, s: &mut State, attempt: u8, nothing_done: bool) {
    let Phase::Held { lease, marked } = s.attempts[usize::from(attempt)].phase else {
        unreachable!("a holder's phase")
    };
    if nothing_done && marked && !m.bugs.takeover_release_deletes {
        // `Finished::LeftToLapse`: the holder taken over from may have run, so nothing is
        // written; the record stays `in_progress` until this lease lapses.
        return answer(s, attempt, Answer::Unavailable);
    }
    let write = match nothing_done {
        true => Write::Release,
        false => {
            s.runs += 1;
            s.marked_runs += u8::from(marked);
            Write::Complete(s.runs)
        }
    };
    phase(s, attempt, Phase::Outcome { lease, write });
}

/// `PendingOutcome::retry`: lands under the lease's fence and token (a lapsed lease alone
/// does not stop it), finds that an earlier try landed, or fails with `LeaseLost`.
fn write_outcome(m: &Protocol, s: &mut State, attempt: u8, lost: bool) {
    let a = s.attempts[usize::from(attempt)];
    let Phase::Outcome { lease, write } = a.phase else {
        unreachable!("an outcome's phase")
    };
    let fresh = match write {
        Write::Complete(n) => Answer::Fresh(n),
        Write::Release => Answer::Unavailable,
    };
    let Some(r) = s
        .primary
        .filter(|r| r.fence == lease.fence && r.token == lease.token)
    else {
        // LeaseLost: superseded or gone; the client still gets the upstream's answer.
        return answer(s, attempt, fresh);
    };
    if r.state != Stored::InProgress {
        // An earlier try landed (`landed()`).
        return answer(s, attempt, fresh);
    }
    match write {
        Write::Complete(n) => {
            s.primary = Some(Record {
                state: Stored::Completed(n),
                ..r
            });
            s.landed.get_or_insert(n);
            s.landed_in_gate |= s.gate_closed;
        }
        Write::Release => {
            s.primary = None;
            s.releases += u8::from(m.waits);
        }
    }
    let journal = &mut s.gateways[usize::from(a.gateway)].journal;
    for (e, _) in journal
        .iter_mut()
        .filter(|(e, _)| e.record.token == lease.token)
    {
        match write {
            Write::Complete(n) => e.record.state = Stored::Completed(n),
            Write::Release => e.released = true,
        }
    }
    if !lost {
        answer(s, attempt, fresh);
    }
}

/// `reclaim`: the fenced release of a record an insert may have left; the client got 503.
fn reclaim(m: &Protocol, s: &mut State, attempt: u8) {
    let Phase::Reclaim(lease) = s.attempts[usize::from(attempt)].phase else {
        unreachable!("a reclaim's phase")
    };
    let ours = |r: &Record| r.fence == lease.fence && r.token == lease.token;
    if s.primary
        .is_some_and(|r| ours(&r) && r.state == Stored::InProgress)
    {
        s.primary = None;
        s.releases += u8::from(m.waits);
    }
    answer(s, attempt, Answer::Unavailable);
}

fn crash(s: &mut State, gateway: u8) {
    s.crashes += 1;
    s.gateways[usize::from(gateway)].down = true;
    let (gone, kept) = (s.attempts.iter()).partition(|a| a.gateway == gateway);
    s.attempts = kept;
    for a in gone {
        if let Some(c) = a.client {
            s.clients[usize::from(c)].1 = false;
        }
    }
}
