//! [`Gate`]: whether new keys may be acquired, closed from the moment a failover is seen
//! until the journal has restored its entries and `failover_grace` has passed since the
//! first detection by any process.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// [`Gate::first_seen_ms`] before the failover's record was read.
const UNKNOWN: i64 = i64::MIN;

/// The gate shared by the connection checks (which close it) and the journal's task (which
/// opens it). Open is one atomic load on the hot path.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    /// True while new keys may be acquired.
    open: AtomicBool,
    /// Failovers seen (a count, so one seen during a restore is handled again).
    seen: AtomicU64,
    /// The first detection of the failover being handled by any process, in ms of the
    /// database clock, as recorded in the store; [`UNKNOWN`] until this process read it.
    first_seen_ms: AtomicI64,
    /// When the gate opens, once the restore for `seen` is done.
    opens_at: Mutex<Option<Instant>>,
    /// Wakes the journal's task when a failover is seen.
    pub(crate) wake: Notify,
    /// Wakes the outcome writes waiting for a restore ([`Gate::wait_restored`]).
    restored_wake: Notify,
}

impl Gate {
    /// A gate, open.
    pub(crate) fn new() -> Self {
        let gate = Self::default();
        gate.open.store(true, Ordering::SeqCst);
        gate.first_seen_ms.store(UNKNOWN, Ordering::SeqCst);
        gate
    }

    /// Closes the gate for a failover (from a connection check: synchronous, so no key is
    /// acquired on the new primary before it is closed) and wakes the journal's task.
    pub(crate) fn failover_seen(&self) {
        // All under the lock, so a concurrent `closed_for` cannot open it again on the
        // previous restore's time.
        let mut opens_at = self.lock();
        *opens_at = None;
        self.first_seen_ms.store(UNKNOWN, Ordering::SeqCst);
        self.seen.fetch_add(1, Ordering::SeqCst);
        self.open.store(false, Ordering::SeqCst);
        drop(opens_at);
        self.wake.notify_one();
    }

    /// The failovers seen so far, to hand to [`Gate::restored`].
    pub(crate) fn failovers(&self) -> u64 {
        self.seen.load(Ordering::SeqCst)
    }

    /// The restore for `failovers` is done; the gate opens at `at`. Ignored when another
    /// failover was seen meanwhile (its restore follows).
    pub(crate) fn restored(&self, failovers: u64, at: Instant) {
        let mut opens_at = self.lock();
        if self.seen.load(Ordering::SeqCst) == failovers {
            *opens_at = Some(at);
        }
        drop(opens_at);
        self.restored_wake.notify_waiters();
    }

    /// The failover being handled was first detected at `ms` (database clock), as the
    /// store recorded it.
    pub(crate) fn first_seen(&self, ms: i64) {
        self.first_seen_ms.store(ms, Ordering::SeqCst);
    }

    /// The first detection (ms, database clock) of the failover being handled, once this
    /// process has read it from the store.
    pub(crate) fn first_seen_ms(&self) -> Option<i64> {
        Some(self.first_seen_ms.load(Ordering::SeqCst)).filter(|&ms| ms != UNKNOWN)
    }

    /// Waits, at most `limit`, until every failover seen so far is restored; true if it is.
    pub(crate) async fn wait_restored(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let notified = self.restored_wake.notified();
            if self.open.load(Ordering::SeqCst) || self.lock().is_some() {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return false;
            }
        }
    }

    /// `None` when new keys may be acquired; else how long until the gate may open (at
    /// least 1 s while a restore is still running).
    pub(crate) fn closed_for(&self) -> Option<Duration> {
        if self.open.load(Ordering::SeqCst) {
            return None;
        }
        let opens_at = self.lock();
        match *opens_at {
            Some(at) if Instant::now() >= at => {
                self.open.store(true, Ordering::SeqCst);
                None
            }
            Some(at) => Some(at - Instant::now()),
            None => Some(Duration::from_secs(1)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.opens_at.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_failover_closes_until_restored_and_the_grace_passed() {
        let gate = Gate::new();
        assert_eq!(gate.closed_for(), None);
        gate.failover_seen();
        assert_eq!(gate.closed_for(), Some(Duration::from_secs(1)));
        assert_eq!(gate.first_seen_ms(), None);
        gate.first_seen(1_000);
        assert_eq!(gate.first_seen_ms(), Some(1_000));
        let handled = gate.failovers();
        gate.restored(handled, Instant::now() + Duration::from_secs(5));
        assert_eq!(gate.closed_for(), Some(Duration::from_secs(5)));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(gate.closed_for(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failover_during_a_restore_keeps_it_closed() {
        let gate = Gate::new();
        gate.failover_seen();
        let first = gate.failovers();
        gate.first_seen(1_000);
        gate.failover_seen();
        assert_eq!(gate.first_seen_ms(), None, "the second is not recorded yet");
        gate.restored(first, Instant::now());
        assert!(
            gate.closed_for().is_some(),
            "the second failover is not restored"
        );
        gate.restored(gate.failovers(), Instant::now());
        assert_eq!(gate.closed_for(), None);
    }
}
