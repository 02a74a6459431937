//! The model's state: the store (its primary, the standby it fails over to, its clock),
//! the gateways (their attempts, journals, crashes) and the clients (sends left, answers).
//! Every number is small (`u8`): the checker hashes and stores each state it meets.

/// A record's state (`RecordState` in `idemgate_core::record`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stored {
    /// `in_progress`: a holder may be forwarding.
    InProgress,
    /// `completed` (or `failed`: alike here) with the response of execution `n`.
    Completed(u8),
}

/// The key's record as the store holds it (`IdempotencyRecord`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Record {
    /// Its state.
    pub state: Stored,
    /// The fence: raised by every take-over (`Lease::fence`).
    pub fence: u8,
    /// The lease's token (`LeaseToken`): which acquire holds it.
    pub token: u8,
    /// When the lease ends, by the store's clock (`lease_expires_at`).
    pub lease_end: u8,
}

/// A lease handed to a holder (`Lease`): the fence and token its writes present.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Lease {
    /// The record's fence at the acquire.
    pub fence: u8,
    /// The acquire's token.
    pub token: u8,
}

/// The outcome a holder writes (`Outcome`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Write {
    /// `complete` with execution `n`'s response.
    Complete(u8),
    /// `release`: the upstream answered "nothing done".
    Release,
}

/// Where one request stands in a gateway's lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// `Lifecycle::begin`: its `insert_or_get` not yet sent.
    Begin,
    /// `Decision::Takeover`: the CAS `take_over` on the record it read.
    TakeOver(Record),
    /// Holding a lease (`Holder`), not yet forwarded; `marked` when acquired by a take-over
    /// (the forward carries the attempt header).
    Held {
        /// The lease held.
        lease: Lease,
        /// Acquired by a take-over.
        marked: bool,
    },
    /// Forwarded; the outcome write (`PendingOutcome::retry`) not yet landed.
    Outcome {
        /// The lease the write presents.
        lease: Lease,
        /// The outcome to write.
        write: Write,
    },
    /// An insert whose answer was lost: followed up to release what it may have left
    /// (`reclaim`).
    Reclaim(Lease),
    /// A duplicate waiting for the key's outcome (`wait_in_flight`, on a route with
    /// `on_in_flight = "wait"`): `releases` is [`State::releases`] when it started reading,
    /// `tried` whether it spent its one acquire of a released key.
    Waiting {
        /// Releases seen so far (a newer one is the release's event).
        releases: u8,
        /// Its one acquire of a released key is spent.
        tried: bool,
    },
    /// A waiter's `begin` (`acquire_for` of a released key, or a lapsed lease on a route
    /// that takes over); `tried` is carried to the wait that may follow.
    WaiterBegin {
        /// Its one acquire of a released key is spent.
        tried: bool,
    },
}

/// A request in a gateway: its phase and the client waiting for it (`None` once the client
/// left).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Attempt {
    /// The gateway running it.
    pub gateway: u8,
    /// The client still connected, if any.
    pub client: Option<u8>,
    /// Its phase.
    pub phase: Phase,
}

/// What a client was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Answer {
    /// Execution `n`'s response, fresh from the upstream.
    Fresh(u8),
    /// Execution `n`'s response, replayed from the store.
    Replay(u8),
    /// `409`: the first request is still running.
    InFlight,
    /// `outcome-unknown`: a holder's lease lapsed before its outcome was written.
    OutcomeUnknown,
    /// `503`: the store failed, refused a new key while its gate is closed, or the
    /// upstream's own "nothing done" answer.
    Unavailable,
}

/// What the clients were answered: each kind's first sighting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Answered {
    /// A replay was answered.
    pub replay: bool,
    /// A replay was answered with other than the first outcome that landed.
    pub wrong_replay: bool,
    /// `outcome-unknown` was answered.
    pub unknown: bool,
    /// A waiter was answered with a replay.
    pub waiter_replay: bool,
    /// A waiter acquired a released key.
    pub waiter_acquired: bool,
}

/// A journal entry (the forward journal's `Entry`): what this gateway acquired, kept on its
/// disk across crashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Entry {
    /// The record as acquired, updated when its outcome landed.
    pub record: Record,
    /// Released (its outcome was `release`): nothing to restore.
    pub released: bool,
}

/// A gateway process.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gateway {
    /// Down (crashed, not yet restarted).
    pub down: bool,
    /// Its journal: entries, each with whether this run of the process wrote it (an entry
    /// of an earlier run is restored with a lapsed lease).
    pub journal: Vec<(Entry, bool)>,
    /// Whether it restored its journal since the last failover.
    pub restored: bool,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The primary's record of the key.
    pub primary: Option<Record>,
    /// The standby's copy (asynchronous replication: what a failover keeps).
    pub standby: Option<Record>,
    /// The store's clock.
    pub now: u8,
    /// New keys refused after a failover until every gateway restored its journal.
    pub gate_closed: bool,
    /// An outcome landed on the primary (or was restored to it) while the gate is closed:
    /// a retry is not answered with it until the gate opens (`ReplayHeld`), since another
    /// gateway's restore may still write a take-over's outcome over it.
    pub landed_in_gate: bool,
    /// Failovers so far.
    pub failovers: u8,
    /// Crashes so far.
    pub crashes: u8,
    /// Tokens handed out so far (each acquire gets the next).
    pub tokens: u8,
    /// The gateways.
    pub gateways: Vec<Gateway>,
    /// Requests in gateways.
    pub attempts: Vec<Attempt>,
    /// Per client: sends left, and whether it waits for an answer.
    pub clients: Vec<(u8, bool)>,
    /// What the clients were answered, as far as the properties need it (a list of every
    /// answer would make states that differ only in their order).
    pub answered: Answered,
    /// Upstream executions so far (execution `n` is the `n`th).
    pub runs: u8,
    /// Of them, those whose forward was marked as a take-over.
    pub marked_runs: u8,
    /// The first response that landed in the store, if any.
    pub landed: Option<u8>,
    /// A fenced write (renew, complete, release) landed under a fence or token the record
    /// no longer had.
    pub stale_write: bool,
    /// Records written back from a journal after a failover.
    pub restores: u8,
    /// Releases landed so far: each announces its release event to the waiters.
    pub releases: u8,
    /// An operator acted on the key (`idemgate release --force` or `resolve`).
    pub operated: bool,
}
