//! The bound on follow-ups: at most [`MAX_RUNNING`] run at once; the others wait in a queue,
//! never dropped. The queue is bounded in bytes ([`MAX_QUEUED_BYTES`]): while it holds that
//! much, new requests are refused before their insert ([`Reclaims::full`]), so no further
//! follow-up can arise, and memory stays bounded.
//!
//! A queued follow-up is an [`Entry`]: the scoped key (three strings), the lease token and
//! two times, about 112 bytes inline plus the strings' bytes ([`Entry::cost`]), some 250 to
//! 400 bytes for typical keys; 8 MiB holds some 20,000 to 30,000 of them. The insert call a
//! queued follow-up came from is dropped (its answer is no longer awaited): the follow-up
//! looks the record up when its turn comes.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::record::{LeaseToken, ScopedKey};

/// Most follow-ups running at once (each a task polling the store); the rest are queued.
pub(in crate::lifecycle) const MAX_RUNNING: usize = 1024;
/// Most bytes of queued follow-ups ([`Entry::cost`]) before new requests are refused.
/// 8 MiB.
pub(in crate::lifecycle) const MAX_QUEUED_BYTES: usize = 8 << 20;
/// A heap allocation's overhead, estimated: counted once per string of an entry.
const ALLOCATION_OVERHEAD: usize = 16;

/// One follow-up: what a lookup of the record and its release need.
#[derive(Debug)]
pub(in crate::lifecycle) struct Entry {
    /// The key the insert was for.
    pub(in crate::lifecycle) key: ScopedKey,
    /// The lease token the insert carried: a record with it is this request's orphan.
    pub(in crate::lifecycle) token: LeaseToken,
    /// The record's TTL, from the insert.
    pub(in crate::lifecycle) record_ttl: Duration,
    /// Past this the record has expired (a TTL after the insert's answer was lost), and the
    /// follow-up ends.
    pub(in crate::lifecycle) until: Instant,
}

impl Entry {
    /// A follow-up of an insert of `key` with `token` and `record_ttl`, whose answer was
    /// lost now.
    pub(in crate::lifecycle) fn new(
        key: ScopedKey,
        token: LeaseToken,
        record_ttl: Duration,
    ) -> Self {
        Self {
            key,
            token,
            record_ttl,
            until: Instant::now() + record_ttl,
        }
    }

    /// The bytes this entry holds while queued: itself and its strings' allocations.
    pub(in crate::lifecycle) fn cost(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.key.principal.capacity()
            + self.key.route.capacity()
            + self.key.key.as_str().len()
            + 3 * ALLOCATION_OVERHEAD
    }
}

/// Running and queued follow-ups of one lifecycle.
#[derive(Debug)]
pub(in crate::lifecycle) struct Reclaims {
    state: Mutex<State>,
    /// Bytes of the queued entries ([`Entry::cost`]), changed under the lock and read
    /// without it (checked on every request).
    queued_bytes: AtomicUsize,
    max_running: usize,
    max_queued_bytes: usize,
}

#[derive(Debug, Default)]
struct State {
    running: usize,
    /// Not empty only while `running` is at its bound: a slot goes to the queue's head
    /// before it is freed.
    queue: VecDeque<Entry>,
}

impl Default for Reclaims {
    fn default() -> Self {
        Self::new(MAX_RUNNING, MAX_QUEUED_BYTES)
    }
}

impl Reclaims {
    /// At most `max_running` at once, queued past that up to `max_queued_bytes`.
    pub(in crate::lifecycle) fn new(max_running: usize, max_queued_bytes: usize) -> Self {
        Self {
            state: Mutex::default(),
            queued_bytes: AtomicUsize::new(0),
            max_running,
            max_queued_bytes,
        }
    }

    /// True while the queue holds its bound: new requests are refused until it drains.
    pub(in crate::lifecycle) fn full(&self) -> bool {
        self.queued_bytes.load(Ordering::Relaxed) >= self.max_queued_bytes
    }

    /// (running, queued) follow-ups.
    #[cfg(test)]
    pub(in crate::lifecycle) fn load(&self) -> (usize, usize) {
        let state = self.lock();
        (state.running, state.queue.len())
    }

    /// Gives `entry` a running slot (returned: the caller runs it, then asks [`Self::next`]),
    /// or queues it (`None`). Never refuses: a request admitted before the queue filled
    /// still gets its follow-up, so the queue may pass its bound by the requests in flight.
    pub(in crate::lifecycle) fn admit(&self, entry: Entry) -> Option<Entry> {
        let mut state = self.lock();
        if state.running < self.max_running {
            state.running += 1;
            return Some(entry);
        }
        if state.queue.is_empty() {
            tracing::warn!(
                running = state.running,
                "more inserts whose answer was lost than follow-ups run at once; queuing the rest"
            );
        }
        let was_full = self.full();
        self.queued_bytes.fetch_add(entry.cost(), Ordering::Relaxed);
        state.queue.push_back(entry);
        if !was_full && self.full() {
            tracing::error!(
                queued = state.queue.len(),
                bytes = self.queued_bytes.load(Ordering::Relaxed),
                "follow-ups of lost inserts fill their queue; new keyed requests get 503 until it drains"
            );
        }
        None
    }

    /// The next queued follow-up for a slot whose follow-up ended; `None` frees the slot.
    pub(in crate::lifecycle) fn next(&self) -> Option<Entry> {
        let mut state = self.lock();
        let Some(entry) = state.queue.pop_front() else {
            state.running -= 1;
            return None;
        };
        self.queued_bytes.fetch_sub(entry.cost(), Ordering::Relaxed);
        if state.queue.is_empty() && state.queue.capacity() > self.max_running {
            state.queue.shrink_to_fit();
        }
        Some(entry)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state stays consistent at every unlock: a panic elsewhere cannot break it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}
