//! A model of the gateway's forward journal (`idemgate-postgres`'s `journal`): the real
//! one is a SQLite file driven by PostgreSQL's timelines and cannot run here, so this
//! follows its documented rules. One journal per gateway slot, kept across the slot's
//! crashes (it is a file).
//!
//! - An acquisition (insert or take-over) is journaled before its lease is handed out; an
//!   outcome once it landed (or was refused); a release (landed, or refused with
//!   `LeaseLost`) drops the entry at once, as `Journal::released` does.
//! - An entry with its outcome is dropped once the standby holds that write, but never
//!   while the gate is closed.
//! - After a failover new keys are refused until `grace` has passed and this slot has
//!   restored its entries: where the store holds no live record of the key; an
//!   `in_progress` one of a lower fence, or of the same fence unless it is the entry's own
//!   lease still in progress; and, for an entry with an outcome, a completed or failed
//!   record of a lower fence. An `in_progress` entry of the running instance gets a live
//!   lease, one from an earlier instance a lapsed lease.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use idemgate_core::integrity::RawRecord;
use idemgate_core::{IdempotencyRecord, Lease, RecordState, StoredResponse, UnixMillis};

use crate::cluster::Cluster;

/// One journaled key.
#[derive(Clone, Debug)]
struct Entry {
    /// The record as this slot last wrote it.
    raw: RawRecord,
    /// The instance that acquired it.
    instance: u64,
    /// The log position of the last write.
    at: usize,
}

/// A slot's forward journal.
#[derive(Debug, Default)]
pub struct Journal {
    entries: Mutex<BTreeMap<String, Entry>>,
    /// Closed by a failover until this slot restored its entries.
    gate_closed: Mutex<bool>,
    /// The store clock when the gate last closed.
    closed_at: Mutex<UnixMillis>,
}

/// Whether `raw` is `lease`'s: its fence and token.
fn ours(raw: &RawRecord, lease: &Lease) -> bool {
    raw.fence == Some(lease.fence) && raw.lease_token == Some(lease.token.0)
}

fn in_progress(raw: &RawRecord) -> bool {
    raw.state.as_deref() == Some(RecordState::InProgress.as_str())
}

impl Journal {
    fn entries(&self) -> MutexGuard<'_, BTreeMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Journals the row `raw` written at log position `at` by `instance`.
    pub fn wrote(&self, raw: RawRecord, instance: u64, at: usize) {
        let name = raw.key.key.as_str().to_owned();
        let entry = Entry { raw, instance, at };
        self.entries().insert(name, entry);
    }

    /// Journals the outcome of `lease` (whether or not the store took it): only on that
    /// lease's entry, token included (`JournalFile::outcome`).
    pub fn outcome(
        &self,
        lease: &Lease,
        state: RecordState,
        response: Option<&StoredResponse>,
        now: UnixMillis,
    ) {
        if let Some(e) = self.entries().get_mut(lease.key.key.as_str()) {
            if ours(&e.raw, lease) && in_progress(&e.raw) {
                e.raw.set_outcome(state, response, now);
            }
        }
    }

    /// Whether a retry answered from `record` is held while the gate is closed: a
    /// completed or failed record whose outcome landed after the failover (a restore may
    /// still write another fence's outcome over it).
    pub fn held(&self, record: &IdempotencyRecord) -> bool {
        let since = *self
            .closed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        record.state != RecordState::InProgress && record.completed_at.is_none_or(|at| at >= since)
    }

    /// The release of `lease`: its entry is dropped, token included (`JournalFile::remove`).
    pub fn released(&self, lease: &Lease) {
        let mut entries = self.entries();
        let name = lease.key.key.as_str();
        if entries.get(name).is_some_and(|e| ours(&e.raw, lease)) {
            entries.remove(name);
        }
    }

    /// Whether new keys are refused.
    pub fn gate_closed(&self) -> bool {
        *self
            .gate_closed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Closes the gate (a failover was detected at store time `now`).
    pub fn close_gate(&self, now: UnixMillis) {
        *self
            .closed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = now;
        *self
            .gate_closed
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
    }

    /// Drops the entries whose outcome the standby holds (not while the gate is closed).
    pub fn confirm(&self, replicated: usize) {
        if self.gate_closed() {
            return;
        }
        self.entries()
            .retain(|_, e| in_progress(&e.raw) || e.at > replicated);
    }

    /// Writes back what the failover lost (the gate opens later, [`Journal::open_gate`]). `live`: the instance now
    /// running in this slot, if any; `lease_ms`: a live lease's length.
    pub fn restore(&self, cluster: &Cluster, live: Option<u64>, lease_ms: i64) {
        let entries: Vec<Entry> = self.entries().values().cloned().collect();
        let primary = cluster.primary();
        let now = primary.now();
        for e in entries {
            let key = e.raw.key.clone();
            let current = primary
                .raw(&key)
                .filter(|r| r.expires_at.is_none_or(|x| x > now));
            if let Some(raw) = restored(&e, current.as_ref(), live, now, lease_ms) {
                if raw.state.as_deref() == Some("completed") {
                    let status = u16::try_from(raw.status.unwrap_or(0)).unwrap_or(0);
                    let body = raw.body.clone().unwrap_or_default();
                    cluster.completed(key.key.as_str(), status, body, true);
                }
                let at = cluster.put(&key, Some(raw));
                cluster.trace(format!("journal restores {} at {at}", key.key.as_str()));
            }
        }
    }

    /// Opens the gate (restored, and the grace has passed).
    pub fn open_gate(&self) {
        *self
            .gate_closed
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = false;
    }
}

/// What restoring `e` writes over `current` (`None`: nothing).
fn restored(
    e: &Entry,
    current: Option<&RawRecord>,
    live: Option<u64>,
    now: UnixMillis,
    lease_ms: i64,
) -> Option<RawRecord> {
    let fence = e.raw.fence.unwrap_or(0);
    let done = !in_progress(&e.raw);
    let writable = match current {
        None => true,
        Some(c) if in_progress(c) => {
            let at = c.fence.unwrap_or(0);
            at < fence || (at == fence && (c.lease_token != e.raw.lease_token || done))
        }
        Some(c) => done && c.fence.unwrap_or(0) < fence,
    };
    if !writable || current == Some(&e.raw) {
        return None;
    }
    let mut raw = e.raw.clone();
    if in_progress(&raw) {
        raw.lease_expires_at = Some(match live == Some(e.instance) {
            true => now + lease_ms,
            false => now - 1,
        });
    }
    Some(raw)
}
