//! A store's background purge (DESIGN.md, "TTL and cleanup"): [`PurgeHandle`] runs it on its
//! own task and stops it when dropped, as mini-redis's `DbDropGuard` does.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::num::NonZeroU32;
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use idemgate_core::{MemoryStore, PurgeHandle};
//!
//! let store = Arc::new(MemoryStore::new());
//! let batch = NonZeroU32::new(1000).unwrap();
//! let purge = PurgeHandle::spawn(store.clone(), Duration::from_secs(60), batch);
//! // ... serve ...
//! purge.shutdown().await; // or drop it
//! # });
//! ```

use std::fmt;
use std::future::Future;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::store::IdempotencyStore;

/// A running background purge: stopped when this is dropped (at its next await point: a
/// batch under way finishes in the store) or by [`PurgeHandle::shutdown`].
///
/// Redis expires records itself; its `purge_expired` deletes nothing, so a purge there is
/// harmless but useless.
pub struct PurgeHandle {
    stop: Option<watch::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

/// Resolves when its [`PurgeHandle`] is dropped or shut down: the stop signal of a loop
/// given to [`PurgeHandle::spawn_with`].
#[derive(Debug)]
pub struct PurgeStopped(watch::Receiver<()>);

impl PurgeStopped {
    /// Waits for the stop signal.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn wait(mut self) {
        // Only the sender's drop ends `changed` (nothing is ever sent).
        while self.0.changed().await.is_ok() {}
    }
}

impl PurgeHandle {
    /// Spawns the default purge of `store`: every `every` (the first run one period after
    /// the start), batches of at most `batch` records until a batch comes back short. A
    /// failed run is logged at `warn` (target `idemgate::purge`) and retried at the next
    /// period. Must be called within a tokio runtime.
    pub fn spawn<S: IdempotencyStore>(store: Arc<S>, every: Duration, batch: NonZeroU32) -> Self {
        Self::spawn_with(move |stopped| async move {
            let run = async {
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                tick.tick().await; // the first tick is immediate
                loop {
                    tick.tick().await;
                    if let Err(e) = run_once(&*store, batch).await {
                        tracing::warn!(target: "idemgate::purge", error = %e, "purge failed; retrying at the next period");
                    }
                }
            };
            tokio::select! {
                () = run => {}
                () = stopped.wait() => {}
            }
        })
    }

    /// Spawns an own purge loop: `run` gets the stop signal, and should end soon after it
    /// resolves (the gateway's loop, with its metrics and logs, is one).
    pub fn spawn_with<F, Fut>(run: F) -> Self
    where
        F: FnOnce(PurgeStopped) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (stop, rx) = watch::channel(());
        let task = tokio::spawn(run(PurgeStopped(rx)));
        Self {
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Stops the purge and waits until its task ended.
    ///
    /// # Cancel safety
    /// Cancel safe: the purge is stopped either way.
    pub async fn shutdown(mut self) {
        self.stop.take();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for PurgeHandle {
    fn drop(&mut self) {
        // Dropping the sender is the signal.
        self.stop.take();
    }
}

impl fmt::Debug for PurgeHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let running = self.task.as_ref().is_some_and(|t| !t.is_finished());
        f.debug_struct("PurgeHandle")
            .field("running", &running)
            .finish()
    }
}

/// One run: batches until a short one; the number of records deleted.
async fn run_once<S: IdempotencyStore>(store: &S, batch: NonZeroU32) -> crate::store::Result<u64> {
    let mut deleted = 0;
    loop {
        let n = store.purge_expired(batch).await?;
        deleted += n;
        if n < u64::from(batch.get()) {
            return Ok(deleted);
        }
        tokio::task::yield_now().await;
    }
}

#[cfg(all(test, feature = "memory"))]
mod tests {
    use super::*;
    use crate::testing::{fp, unique_key};
    use crate::{InsertRequest, LeaseToken, MemoryStore};

    async fn expiring(store: &MemoryStore, n: usize) {
        for i in 0..n {
            let req = InsertRequest {
                key: unique_key(&format!("p{i}")),
                fingerprint: fp(1),
                token: LeaseToken::random(),
                lease_ttl: Duration::from_millis(10),
                record_ttl: Duration::from_millis(10),
            };
            store.insert_or_get(&req).await.unwrap();
        }
    }

    #[tokio::test]
    async fn the_purge_runs_every_period_and_stops_when_dropped() {
        let store = Arc::new(MemoryStore::new());
        let batch = NonZeroU32::new(2).unwrap();
        expiring(&store, 5).await;
        tokio::time::sleep(Duration::from_millis(30)).await;
        let purge = PurgeHandle::spawn(store.clone(), Duration::from_millis(50), batch);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(store.purge_expired(batch).await.unwrap(), 0, "all purged");
        drop(purge);
        tokio::time::sleep(Duration::from_millis(20)).await;
        expiring(&store, 3).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            store.purge_expired(batch).await.unwrap(),
            2,
            "no purge ran since"
        );
    }

    #[tokio::test]
    async fn shutdown_waits_for_an_own_loop_to_end() {
        let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = ended.clone();
        let purge = PurgeHandle::spawn_with(move |stopped| async move {
            stopped.wait().await;
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        purge.shutdown().await;
        assert!(ended.load(std::sync::atomic::Ordering::SeqCst));
    }
}
