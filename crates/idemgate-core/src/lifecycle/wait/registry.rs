//! The waiters of one process, by key: one slot per waited key, with one watcher task that
//! reads the key's record for all its waiters (on an event, on a waiter's arrival, and on a
//! slow poll), so a key costs the store one read per event whatever the number of waiters.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::{watch, Notify};

use crate::events::{EventKind, KeyEvent, KeyId, Released};
use crate::record::{IdempotencyRecord, UnixMillis};

/// Releases of one key a waiter can still catch up on, however late it wakes.
const KEPT_RELEASES: usize = 8;

/// What the waiters of a key know of it: the watcher's last read, and its last releases.
#[derive(Clone, Debug, Default)]
pub(super) struct Seen {
    pub(super) read: Read,
    /// The number of the last release known when `read` began: `read` is at least as new
    /// as every release up to it.
    pub(super) read_after: u64,
    /// The key's last [`KEPT_RELEASES`] releases, oldest first, numbered in the order this
    /// process learnt them: a waiter woken once for two releases (a rerun released at once)
    /// still sees the first, whose rerun the second ended.
    released: [Option<(u64, Released)>; KEPT_RELEASES],
}

impl Seen {
    /// The number of the last release known (0 for none).
    pub(super) fn last_release(&self) -> u64 {
        self.released
            .iter()
            .rev()
            .flatten()
            .next()
            .map_or(0, |(n, _)| *n)
    }

    /// The releases numbered above `n`, oldest first.
    pub(super) fn releases_after(&self, n: u64) -> impl Iterator<Item = (u64, Released)> + '_ {
        self.released
            .iter()
            .flatten()
            .copied()
            .filter(move |(m, _)| *m > n)
    }

    /// Adds release `r` as number `n`, unless a release of its lease is known already (a
    /// lease is released once: heard twice, in process and from the store, or a forged
    /// repeat with another status or `Retry-After`). True when added.
    fn push_release(&mut self, n: u64, r: Released) -> bool {
        if self
            .released
            .iter()
            .flatten()
            .any(|(_, known)| known.lease == r.lease)
        {
            return false;
        }
        self.released.rotate_left(1);
        self.released[KEPT_RELEASES - 1] = Some((n, r));
        true
    }
}

/// The watcher's last read of a key's record.
#[derive(Clone, Debug, Default)]
pub(super) enum Read {
    /// Not read yet.
    #[default]
    Pending,
    /// The live record and the time of the read (this process's clock, ms).
    Record(Arc<IdempotencyRecord>, UnixMillis),
    /// No live record.
    Gone,
}

/// One waited key.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) seen: watch::Sender<Seen>,
    /// Asks the watcher for a read now.
    pub(super) poke: Notify,
    /// Waiters of this key; the slot leaves the table with the last.
    waiters: AtomicUsize,
    /// The number of the last release a waiter of this process claimed to acquire.
    claimed: AtomicU64,
}

impl Slot {
    /// True for the first waiter to claim release `n`: the one of this process that
    /// acquires the released key; the others wait on its run.
    pub(super) fn claim(&self, n: u64) -> bool {
        self.claimed.fetch_max(n, Ordering::Relaxed) < n
    }
}

/// The waiters of one process (see the module).
#[derive(Debug)]
pub(crate) struct Waiters {
    slots: Mutex<HashMap<KeyId, Arc<Slot>>>,
    /// Waiters of every key.
    count: AtomicUsize,
    /// Numbers releases in the order they were learnt.
    releases: AtomicUsize,
    /// Set once other processes' events are listened to (from the first waiter on).
    pub(super) listening: OnceLock<()>,
    /// Grows by one on each [`Waiters::end_waits`]: waits that began before end.
    closing: watch::Sender<u64>,
}

impl Default for Waiters {
    fn default() -> Self {
        Self {
            slots: Mutex::default(),
            count: AtomicUsize::new(0),
            releases: AtomicUsize::new(0),
            listening: OnceLock::new(),
            closing: watch::Sender::new(0),
        }
    }
}

/// A waiter's place: counted until dropped.
#[derive(Debug)]
pub(super) struct Place {
    waiters: Arc<Waiters>,
    key: KeyId,
    pub(super) slot: Arc<Slot>,
    /// The slot's news, subscribed before the watcher's first read for this waiter.
    pub(super) seen: watch::Receiver<Seen>,
    /// [`Waiters::end_waits`]'s generation, and its value when this wait began.
    pub(super) closing: watch::Receiver<u64>,
    pub(super) generation: u64,
}

impl Waiters {
    /// Joins the waiters of `key`, unless `max` wait already. The second value is true when
    /// the slot is new: its watcher is to be started.
    pub(super) fn join(self: &Arc<Self>, key: KeyId, max: usize) -> Option<(Place, bool)> {
        let count = self.count.fetch_add(1, Ordering::Relaxed);
        if count >= max {
            self.count.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        // Added to, not set: the gauge counts every lifecycle of the process.
        metrics::gauge!("idempotency_waiters").increment(1.0);
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let mut new = false;
        let slot = slots.entry(key).or_insert_with(|| {
            new = true;
            Arc::new(Slot {
                seen: watch::Sender::new(Seen::default()),
                poke: Notify::new(),
                waiters: AtomicUsize::new(0),
                claimed: AtomicU64::new(0),
            })
        });
        slot.waiters.fetch_add(1, Ordering::Relaxed);
        let slot = slot.clone();
        drop(slots);
        let seen = slot.seen.subscribe();
        let closing = self.closing.subscribe();
        let generation = *closing.borrow();
        let place = Place {
            waiters: self.clone(),
            key,
            slot,
            seen,
            closing,
            generation,
        };
        Some((place, new))
    }

    /// Hands `event` to the waiters of its key, if any (no lock when nobody waits).
    pub(crate) fn deliver(&self, event: KeyEvent) {
        if self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let slot = self
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&event.key)
            .cloned();
        let Some(slot) = slot else { return };
        match event.kind {
            EventKind::Written => slot.poke.notify_one(),
            EventKind::Released(r) => {
                let n = self.releases.fetch_add(1, Ordering::Relaxed) as u64 + 1;
                slot.seen.send_if_modified(|seen| seen.push_release(n, r));
                // Then a read: who runs it again shows there.
                slot.poke.notify_one();
            }
        }
    }

    /// After events may have been missed (a listener reconnected): every waited key is read
    /// again.
    pub(crate) fn missed(&self) {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        for slot in slots.values() {
            slot.poke.notify_one();
        }
    }

    /// Ends every wait under way ([`Answer::InFlight`](crate::lifecycle::Answer::InFlight)):
    /// the process stops. Waits that begin later are not ended.
    pub(crate) fn end_waits(&self) {
        self.closing.send_modify(|g| *g += 1);
    }

    /// Waiters of every key.
    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.waiters.count.fetch_sub(1, Ordering::Relaxed);
        metrics::gauge!("idempotency_waiters").decrement(1.0);
        let mut slots = self.waiters.slots.lock().unwrap_or_else(|p| p.into_inner());
        if self.slot.waiters.fetch_sub(1, Ordering::Relaxed) == 1 {
            // The last: the slot leaves (its watcher stops when it sees no receiver).
            if slots
                .get(&self.key)
                .is_some_and(|s| Arc::ptr_eq(s, &self.slot))
            {
                slots.remove(&self.key);
            }
        }
    }
}
