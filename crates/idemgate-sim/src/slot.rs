//! [`SlotStore`]: what one gateway instance sees of the store. Every call goes through
//! seeded faults (delayed; lost before it is sent; its answer lost after it applied; the
//! store unreachable) and the instance's crash (a dead instance's calls never return, at
//! whichever await point it died). A call that was sent applies in a task of its own, as a
//! statement already on the wire does, whether or not its caller is still there.

mod ops;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use idemgate_core::{StoreError, UnixMillis};

use crate::cluster::Cluster;
use crate::journal::Journal;
use crate::rng::Rng;
use crate::Planted;

/// How often each fault hits a store call, in percent, drawn per run.
#[derive(Clone, Copy, Debug)]
pub struct FaultRates {
    /// A call delayed by up to 3 s (past the 2 s store deadline).
    pub slow: u64,
    /// A call lost before the store applied it.
    pub lost_before: u64,
    /// A call that applied, its answer lost.
    pub lost_after: u64,
}

/// Who holds a lease token: the instance that got it, and whether by a take-over.
#[derive(Clone, Copy, Debug)]
pub struct Owner {
    /// The instance.
    pub instance: u64,
    /// Got by a take-over.
    pub takeover: bool,
    /// An outcome write under it was attempted.
    pub wrote: bool,
    /// A release under it landed.
    pub released: bool,
}

/// The lease tokens handed out in a run.
#[derive(Debug, Default)]
pub struct Owners(Mutex<BTreeMap<i64, Owner>>);

impl Owners {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<i64, Owner>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes that `instance` got `token`.
    pub fn got(&self, token: i64, instance: u64, takeover: bool) {
        let owner = Owner {
            instance,
            takeover,
            wrote: false,
            released: false,
        };
        self.lock().insert(token, owner);
    }

    /// Notes an outcome write attempted under `token`.
    pub fn wrote(&self, token: i64) {
        if let Some(o) = self.lock().get_mut(&token) {
            o.wrote = true;
        }
    }

    /// Notes a release that landed under `token`.
    pub fn released(&self, token: i64) {
        if let Some(o) = self.lock().get_mut(&token) {
            o.released = true;
        }
    }

    /// The owner of `token`.
    pub fn of(&self, token: i64) -> Option<Owner> {
        self.lock().get(&token).copied()
    }
}

/// What one run shares among its slot stores.
#[derive(Debug)]
pub struct Shared {
    /// The store.
    pub cluster: Arc<Cluster>,
    /// The seeded source.
    pub rng: Rng,
    /// This run's fault rates.
    pub rates: FaultRates,
    /// The planted bug, if any.
    pub planted: Option<Planted>,
    /// How the gateways reach the upstream.
    pub path: crate::Path,
    /// The proxy's `upstream_timeout` (on [`crate::Path::Proxy`]).
    pub upstream_timeout: Duration,
    /// Lease tokens and their owners.
    pub owners: Owners,
    /// The next gateway instance's id.
    pub next_instance: std::sync::atomic::AtomicU64,
}

/// The store as one gateway instance sees it.
#[derive(Clone, Debug)]
pub struct SlotStore {
    shared: Arc<Shared>,
    journal: Arc<Journal>,
    instance: u64,
    alive: Arc<AtomicBool>,
}

impl SlotStore {
    /// The store of `instance`, living while `alive`, journaling in `journal`.
    pub fn new(
        shared: Arc<Shared>,
        journal: Arc<Journal>,
        instance: u64,
        alive: Arc<AtomicBool>,
    ) -> Self {
        Self {
            shared,
            journal,
            instance,
            alive,
        }
    }

    /// A crashed instance goes no further: its future never completes.
    async fn halt_if_dead(&self) {
        if !self.alive.load(Ordering::Relaxed) {
            std::future::pending::<()>().await;
        }
    }

    /// Runs `apply` on the store under this run's faults.
    async fn faulty<T, F>(&self, op: &'static str, apply: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Shared, &Journal, u64) -> Result<T, StoreError> + Send + 'static,
    {
        self.halt_if_dead().await;
        let (rng, rates) = (&self.shared.rng, self.shared.rates);
        let cluster = &self.shared.cluster;
        let delay = match rng.chance(rates.slow) {
            true => {
                cluster.fault("store call slow");
                rng.millis(0, 3_000)
            }
            false => rng.millis(0, 20),
        };
        let lost = rng.chance(rates.lost_before);
        if lost {
            cluster.fault("store call lost before it applied");
        }
        if cluster.unreachable() || lost {
            tokio::time::sleep(delay).await;
            self.halt_if_dead().await;
            return Err(unavailable(op, "not applied"));
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (shared, journal, instance) =
            (self.shared.clone(), self.journal.clone(), self.instance);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let out = match shared.cluster.unreachable() {
                true => Err(unavailable(op, "not applied")),
                false => apply(&shared, &journal, instance),
            };
            let _ = tx.send(out);
        });
        let out = rx.await.unwrap_or(Err(unavailable(op, "dropped")));
        self.halt_if_dead().await;
        if rng.chance(rates.lost_after) {
            cluster.fault("store answer lost after it applied");
            tokio::time::sleep(rng.millis(0, 3_000)).await;
            self.halt_if_dead().await;
            return Err(unavailable(op, "answer lost"));
        }
        out
    }
}

impl SlotStore {
    /// Journals an acquisition whose answer reached this instance.
    fn journal_acquired(&self, acquired: Option<(idemgate_core::integrity::RawRecord, usize)>) {
        if let Some((raw, at)) = acquired {
            self.journal.wrote(raw, self.instance, at);
        }
    }
}

fn unavailable(op: &str, what: &str) -> StoreError {
    StoreError::Unavailable(format!("simulated: {op} {what}").into())
}

/// Polls a memory store call, which never waits, to its end.
fn now<T>(f: impl Future<Output = T>) -> T {
    use futures_util::FutureExt;
    f.now_or_never().expect("the memory store never waits")
}

/// The store clock of the current primary.
pub fn store_now(shared: &Shared) -> UnixMillis {
    shared.cluster.primary().now()
}

/// A lease of `ttl` as milliseconds.
pub fn ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}
