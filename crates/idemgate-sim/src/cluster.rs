//! The simulated store: the real [`MemoryStore`] as the primary, an asynchronously
//! replicated standby (a prefix of the primary's commits, by row images), store outages,
//! clock jumps and a failover that loses the unreplicated suffix. It also keeps the trace
//! of the run and what the checks need from the store's side.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use idemgate_core::integrity::RawRecord;
use idemgate_core::{MemoryStore, ScopedKey, UnixMillis};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// The store clock's reading when a run starts (fixed, so runs repeat exactly).
pub const EPOCH: UnixMillis = 1_700_000_000_000;

/// The primary, its standby, and the run's observations.
#[derive(Debug)]
pub struct Cluster {
    state: Mutex<State>,
    started: Instant,
    /// Print each event (`IDEMGATE_SIM_TRACE=1`, for `simulate --seed`).
    print: bool,
}

#[derive(Debug)]
struct State {
    primary: Arc<MemoryStore>,
    /// Row images of every commit on the current primary's history, in commit order.
    log: Vec<(ScopedKey, Option<RawRecord>)>,
    /// How many of `log` the standby holds.
    replicated: usize,
    unreachable: bool,
    failovers: u32,
    trace: Sha256,
    events: u64,
    /// Writes that landed although their lease was not the record's (check 4).
    stale_writes: Vec<String>,
    /// The first response that completed each key while no failover was handled, by key.
    first_completed: BTreeMap<String, (u16, Bytes)>,
    /// The last response that completed each key while a failover was handled (a restore,
    /// or an outcome written meanwhile): provisional, since replays of it are held and a
    /// later restore may write another fence's outcome over it.
    provisional: BTreeMap<String, (u16, Bytes)>,
    /// Every response that completed a key, by key, in the order they landed.
    landed: Vec<(String, u16, Bytes)>,
    /// Faults injected, by kind.
    faults: BTreeMap<&'static str, u64>,
}

impl Default for Cluster {
    fn default() -> Self {
        Self::new()
    }
}

impl Cluster {
    /// An empty cluster whose clock starts at [`EPOCH`].
    pub fn new() -> Self {
        let state = State {
            primary: Arc::new(MemoryStore::starting_at(EPOCH)),
            log: Vec::new(),
            replicated: 0,
            unreachable: false,
            failovers: 0,
            trace: Sha256::new(),
            events: 0,
            stale_writes: Vec::new(),
            first_completed: BTreeMap::new(),
            provisional: BTreeMap::new(),
            landed: Vec::new(),
            faults: BTreeMap::new(),
        };
        Self {
            state: Mutex::new(state),
            started: Instant::now(),
            print: std::env::var_os("IDEMGATE_SIM_TRACE").is_some(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current primary.
    pub fn primary(&self) -> Arc<MemoryStore> {
        self.lock().primary.clone()
    }

    /// Records the row image of `key` after a write that landed; returns its log position.
    pub fn commit(&self, key: &ScopedKey) -> usize {
        let mut s = self.lock();
        let image = s.primary.raw(key);
        s.log.push((key.clone(), image));
        s.log.len()
    }

    /// Writes `raw` (or deletes the key) on the primary as a commit (a journal's restore).
    pub fn put(&self, key: &ScopedKey, raw: Option<RawRecord>) -> usize {
        self.primary().put_raw(key, raw);
        self.commit(key)
    }

    /// The standby catches up to at most `lag` commits behind the primary.
    pub fn replicate(&self, lag: usize) {
        let mut s = self.lock();
        let target = s.log.len().saturating_sub(lag);
        s.replicated = s.replicated.max(target);
    }

    /// How many commits the standby holds.
    pub fn replicated(&self) -> usize {
        self.lock().replicated
    }

    /// Promotes the standby: the commits it had not received are lost. Returns how many.
    pub fn failover(&self) -> usize {
        let mut s = self.lock();
        let now = s.primary.now();
        let promoted = MemoryStore::starting_at(now);
        let kept = s.replicated;
        let lost = s.log.len() - kept;
        s.log.truncate(kept);
        for (key, image) in &s.log {
            promoted.put_raw(key, image.clone());
        }
        s.primary = Arc::new(promoted);
        s.failovers += 1;
        lost
    }

    /// Failovers so far.
    pub fn failovers(&self) -> u32 {
        self.lock().failovers
    }

    /// Whether the store answers at all.
    pub fn unreachable(&self) -> bool {
        self.lock().unreachable
    }

    /// Cuts the store off (`true`) or brings it back.
    pub fn set_unreachable(&self, off: bool) {
        self.lock().unreachable = off;
    }

    /// Steps the primary's clock by `by_ms`.
    pub fn jump_clock(&self, by_ms: i64) {
        self.primary().shift_clock(by_ms);
    }

    /// Adds one event to the run's trace (its digest proves two runs of a seed identical).
    pub fn trace(&self, event: impl AsRef<str>) {
        let at = self.started.elapsed().as_millis();
        if self.print {
            eprintln!("{at:>7} ms  {}", event.as_ref());
        }
        let mut s = self.lock();
        s.events += 1;
        s.trace.update(format!("{at} {}\n", event.as_ref()));
    }

    /// The trace's digest (hex) and its number of events.
    pub fn digest(&self) -> (String, u64) {
        let s = self.lock();
        (hex::encode(s.trace.clone().finalize()), s.events)
    }

    /// Notes a write that landed under a lease the record did not carry.
    pub fn stale_write(&self, what: String) {
        self.lock().stale_writes.push(what);
    }

    /// The stale writes seen.
    pub fn stale_writes(&self) -> Vec<String> {
        self.lock().stale_writes.clone()
    }

    /// Notes a completion that landed, `provisional` while a failover is handled (the
    /// journal's gate closed: replays of it are held, `ReplayHeld`).
    pub fn completed(&self, key: &str, status: u16, body: Bytes, provisional: bool) {
        let mut inner = self.lock();
        inner.landed.push((key.to_owned(), status, body.clone()));
        match provisional {
            true => inner.provisional.insert(key.to_owned(), (status, body)),
            false => match inner.first_completed.contains_key(key) {
                true => None,
                false => inner.first_completed.insert(key.to_owned(), (status, body)),
            },
        };
    }

    /// What replays of `key` must equal: its first completion that landed while no
    /// failover was handled, else the last that landed while one was (what the record held
    /// when the held replays were let go).
    pub fn first_completed(&self, key: &str) -> Option<(u16, Bytes)> {
        let inner = self.lock();
        (inner.first_completed.get(key))
            .or(inner.provisional.get(key))
            .cloned()
    }

    /// Every response that completed a key: key, status, body.
    pub fn landed(&self) -> Vec<(String, u16, Bytes)> {
        self.lock().landed.clone()
    }

    /// Counts one injected fault of `kind` (and traces it).
    pub fn fault(&self, kind: &'static str) {
        *self.lock().faults.entry(kind).or_default() += 1;
        self.trace(format!("fault {kind}"));
    }

    /// The faults injected, by kind.
    pub fn faults(&self) -> BTreeMap<&'static str, u64> {
        self.lock().faults.clone()
    }

    /// Every record on the primary, sorted by key, with the primary's clock.
    pub fn records(&self) -> (Vec<RawRecord>, UnixMillis) {
        let primary = self.primary();
        let mut all = primary.raw_records();
        all.sort_by(|a, b| a.key.key.as_str().cmp(b.key.key.as_str()));
        (all, primary.now())
    }
}
