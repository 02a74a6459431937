//! A model of idemgate's protocol, checked exhaustively for small bounds with
//! [stateright](https://docs.rs/stateright): clients that send and retry one key, gateways
//! that run the lifecycle (`Lifecycle::begin`: `insert_or_get` and the decision; `take_over`
//! where the route opts in; renewals; the forward; `PendingOutcome::retry` until the
//! outcome write lands or the fence is superseded), crash at any step and restart, and a
//! store whose primary fails over to an asynchronously replicated standby, with and without
//! the forward journal.
//!
//! Properties checked in every reachable state ([`Protocol::properties`]):
//! - **at most once**: one execution of the key's operation, or, where the route opts in to
//!   take-overs, one unmarked execution and the rest marked by the attempt header;
//! - **replays equal the stored outcome**: every replay is the first outcome that landed;
//! - **no stale write lands**: a renew, complete or release lands only under the record's
//!   fence and token.
//!
//! What the model assumes, and so does not prove:
//! - The upstream's "nothing done" answers (408, 425, 429, 503, a challenged 401, connection
//!   refused) are non-executions: the holder releases the key.
//! - The record's TTL outlasts the run (after it, a key is new by contract), and
//!   `failover_grace` outlasts the restart of every process that holds journal entries (the
//!   documented gap: a process that dies with the primary and stays down past the grace).
//! - A store call is atomic; a failed one either did nothing, or landed with its answer lost
//!   (an insert then followed up by `reclaim`, an outcome write retried).
//! - Not modelled yet: waiters attached to a key, operator `release` and `resolve`, record
//!   TTL expiry, `Idempotency-Key` mismatches (one fingerprint).
//!
//! [`Bugs`] plants known-wrong variants; each must produce a counterexample.

use stateright::{Model, Property};

mod canonical;
mod failover;
mod operator;
mod state;
mod step;
mod wait;

pub use state::{
    Answer, Answered, Attempt, Entry, Gateway, Lease, Phase, Record, State, Stored, Write,
};
pub use step::Action;

/// Known-wrong variants of the protocol, each of which the checker must refute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bugs {
    /// `renew` extends whatever `in_progress` record it finds, without checking its fence
    /// and token.
    pub renew_unfenced: bool,
    /// A lapsed lease is taken over by default (as if every route opted in).
    pub takeover_by_default: bool,
    /// After a failover the journal is not consulted: the gate opens with nothing restored.
    pub journal_ignored: bool,
    /// A take-over whose forward did nothing releases (deletes) the record, as the code did
    /// before the model found it: the next request runs afresh, unmarked.
    pub takeover_release_deletes: bool,
    /// The journal's restore never writes over a completed record, as the code did before
    /// the model found it: a take-over the failover lost loses to the outcome its earlier
    /// holder wrote after the failover.
    pub restore_keeps_completed: bool,
    /// A retry is answered from an outcome that landed while the gate is closed.
    pub replays_not_held: bool,
}

/// The protocol's bounds and settings.
#[derive(Clone, Debug)]
pub struct Protocol {
    /// Clients sending the key (duplicates of one request).
    pub clients: u8,
    /// Gateway processes.
    pub gateways: u8,
    /// Sends per client: the first and its retries.
    pub sends: u8,
    /// Most gateway crashes in a run.
    pub max_crashes: u8,
    /// Most store failovers in a run.
    pub max_failovers: u8,
    /// The store's clock stops here (ticks).
    pub max_time: u8,
    /// A lease's length in ticks (`lease_ttl`).
    pub lease_ttl: u8,
    /// The forward journal (`forward_journal_file`) is on.
    pub journal: bool,
    /// The route opts in to take-overs of a lapsed lease (`lease_expired = "takeover"`).
    pub takeover: bool,
    /// A store call may land with its answer lost.
    pub lost_answers: bool,
    /// Duplicates of an in-flight key wait for its outcome (`on_in_flight = "wait"`).
    pub waits: bool,
    /// An operator may act once on a stuck key (`idemgate release --force`, `resolve`).
    pub operator: bool,
    /// Planted bugs.
    pub bugs: Bugs,
}

impl Protocol {
    /// The bound CI checks to completion (within minutes on 2 cores): 2 clients of 2 sends
    /// each, 2 gateways, at most 1 crash and 1 failover, lost store answers, the journal on,
    /// the default `lease_expired = "unknown"`; leases of 1 tick on a clock of 2.
    pub fn ci() -> Self {
        Self {
            clients: 2,
            gateways: 2,
            sends: 2,
            max_crashes: 1,
            max_failovers: 1,
            max_time: 2,
            lease_ttl: 1,
            journal: true,
            takeover: false,
            lost_answers: true,
            waits: false,
            operator: false,
            bugs: Bugs::default(),
        }
    }

    /// A longer bound, run on purpose (an ignored test): [`Self::ci`] with
    /// leases of 2 ticks on a clock of 3 (a lease renewed before it lapses). 450,897,392
    /// states (50,354,427 unique), depth 35: 11 minutes on 2 cores.
    pub fn long() -> Self {
        Self {
            max_time: 3,
            lease_ttl: 2,
            ..Self::ci()
        }
    }

    /// The initial state: an empty store, every gateway up.
    pub fn initial(&self) -> State {
        let gateway = Gateway {
            down: false,
            journal: Vec::new(),
            restored: true,
        };
        State {
            primary: None,
            standby: None,
            now: 0,
            gate_closed: false,
            landed_in_gate: false,
            failovers: 0,
            crashes: 0,
            tokens: 0,
            gateways: vec![gateway; usize::from(self.gateways)],
            attempts: Vec::new(),
            clients: vec![(self.sends, false); usize::from(self.clients)],
            answered: Answered::default(),
            runs: 0,
            marked_runs: 0,
            landed: None,
            stale_write: false,
            restores: 0,
            releases: 0,
            operated: false,
        }
    }
}

/// The names of the properties, for tests and reports.
pub mod names {
    /// One execution (or only marked take-overs beyond it, where opted in).
    pub const AT_MOST_ONCE: &str = "at most once";
    /// Every replay is the first outcome that landed.
    pub const REPLAYS_EQUAL: &str = "replays equal the stored outcome";
    /// No fenced write lands under a stale fence or token.
    pub const NO_STALE_WRITE: &str = "no stale write lands";
    /// Reachable: a replay answered (the model is not vacuous).
    pub const A_REPLAY: &str = "a replay is answered";
    /// Reachable: `outcome-unknown` answered.
    pub const AN_UNKNOWN: &str = "an outcome is unknown";
    /// Reachable: a journal restores a record after a failover.
    pub const A_RESTORE: &str = "a journal restores a record";
    /// Reachable: a failover while a holder is between its forward and its outcome write.
    pub const FAILOVER_MID_FLIGHT: &str = "a failover with an outcome pending";
    /// Reachable (with waiters): a waiter answered with a replay.
    pub const A_WAITER_REPLAY: &str = "a waiter gets a replay";
    /// Reachable (with waiters): a waiter acquires a key its holder released.
    pub const A_WAITER_ACQUIRES: &str = "a waiter acquires a released key";
    /// Reachable (with an operator): an operator released or resolved a stuck key.
    pub const AN_OPERATOR_ACTS: &str = "an operator acts on a stuck key";
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![self.initial()]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        step::actions(self, state, actions);
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        step::next(self, last, action)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(names::AT_MOST_ONCE, |m: &Self, s: &State| {
                let unmarked = s.runs - s.marked_runs;
                unmarked <= 1 && (m.takeover || s.runs <= 1)
            }),
            Property::always(names::REPLAYS_EQUAL, |_, s: &State| {
                !s.answered.wrong_replay
            }),
            Property::always(names::NO_STALE_WRITE, |_, s: &State| !s.stale_write),
            Property::sometimes(names::A_REPLAY, |_, s: &State| s.answered.replay),
            Property::sometimes(names::AN_UNKNOWN, |_, s: &State| s.answered.unknown),
            Property::sometimes(names::A_RESTORE, |_, s: &State| s.restores > 0),
            Property::sometimes(names::A_WAITER_REPLAY, |_, s: &State| {
                s.answered.waiter_replay
            }),
            Property::sometimes(names::A_WAITER_ACQUIRES, |_, s: &State| {
                s.answered.waiter_acquired
            }),
            Property::sometimes(names::AN_OPERATOR_ACTS, |_, s: &State| s.operated),
            Property::sometimes(names::FAILOVER_MID_FLIGHT, |_, s: &State| {
                s.failovers > 0
                    && (s.attempts.iter()).any(|a| matches!(a.phase, Phase::Outcome { .. }))
            }),
        ]
    }
}
