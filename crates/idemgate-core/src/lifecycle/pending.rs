//! The bound on outcome writes not yet landed: past it, new requests are refused instead of
//! piling up responses in memory while the store is slow or down.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::LifecycleConfig;

/// Counts of pending outcome writes and the response bytes they hold.
#[derive(Debug, Default)]
pub(super) struct Pending {
    count: AtomicUsize,
    bytes: AtomicUsize,
}

impl Pending {
    pub(super) fn full(&self, config: &LifecycleConfig) -> bool {
        self.count.load(Ordering::Relaxed) >= config.max_pending_outcomes
            || self.bytes.load(Ordering::Relaxed) >= config.max_pending_outcome_bytes
    }

    pub(super) fn load(&self) -> (usize, usize) {
        (
            self.count.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }

    /// Counts one outcome write, `what` with `bytes`, until the guard drops.
    pub(super) fn enter(self: &Arc<Self>, what: &'static str, bytes: usize) -> PendingGuard {
        let count = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        metrics::gauge!("idempotency_pending_outcomes").set(count as f64);
        PendingGuard {
            pending: self.clone(),
            bytes,
            settled: false,
            what,
        }
    }
}

/// One pending outcome write. Dropped before [`PendingGuard::settle`] (shutdown's deadline
/// ended the task), it logs and counts the abandoned write: its record stays `in_progress`
/// and its retries will get `outcome-unknown`.
#[derive(Debug)]
pub(super) struct PendingGuard {
    pending: Arc<Pending>,
    bytes: usize,
    settled: bool,
    what: &'static str,
}

impl PendingGuard {
    pub(super) fn settle(&mut self) {
        self.settled = true;
    }
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        let count = self.pending.count.fetch_sub(1, Ordering::Relaxed) - 1;
        metrics::gauge!("idempotency_pending_outcomes").set(count as f64);
        self.pending.bytes.fetch_sub(self.bytes, Ordering::Relaxed);
        if !self.settled {
            tracing::error!(
                op = self.what,
                "outcome write abandoned before it landed (shutdown); the record stays in progress"
            );
            metrics::counter!("idempotency_outcome_abandoned_total", "reason" => "shutdown")
                .increment(1);
        }
    }
}
