//! The runner of writes that must reach the synchronous standbys
//! ([`crate::PostgresOptions::with_require_synchronous_replication`]): a write permit, a
//! task of its own, and the confirmation that the standbys have it (`sync.rs`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use idemgate_core::StoreError;
use sqlx::PgConnection;
use tokio::sync::{oneshot, OwnedSemaphorePermit};
use tokio::time::Instant;

use crate::durability::{confirm, refusal};
use crate::error::classify;
use crate::insert::{Write, Wrote};
use crate::store::PostgresStore;
use crate::sync::{SyncError, SyncGuard, STALL_AFTER};

/// The answer of a write's task to its caller.
type Reply = oneshot::Sender<Result<Wrote, StoreError>>;

/// How long past the deadline a confirmation's last statement may take.
const CONFIRM_MARGIN: Duration = Duration::from_millis(500);

/// What became of a write by its deadline.
enum Ran {
    /// It ended in time, with its result.
    InTime(Result<(Wrote, bool), StoreError>),
    /// Its deadline passed first (the caller was answered); it ended later with this.
    Late(Result<(Wrote, bool), StoreError>),
}

/// The error of `write` not confirmed by a synchronous standby, counted and logged: outcome
/// unknown ([`StoreError::Unavailable`]), so an insert is followed up and an outcome retried
/// (and the retry confirmed, [`SyncGuard::remember`]). The server is read again in the
/// background, so new keys are refused at once if the standbys are gone.
fn unconfirmed(
    store: &PostgresStore,
    guard: &Arc<SyncGuard>,
    write: &Write,
    reason: String,
) -> StoreError {
    let op = write.op();
    metrics::counter!("idempotency_store_unconfirmed_writes_total", "backend" => "postgres", "op" => op)
        .increment(1);
    tracing::warn!(op, %reason, "PostgreSQL write not confirmed by a synchronous standby");
    guard.remember(write);
    store.recheck_soon(guard);
    StoreError::Unavailable(Box::new(SyncError::Unconfirmed { op, reason }))
}

impl PostgresStore {
    /// [`PostgresStore::guarded`] once a write permit is free (up to the acquire timeout).
    ///
    /// # Errors
    /// As [`PostgresStore::guarded`]; [`StoreError::Unavailable`] without a permit in time.
    pub(crate) async fn guarded_write(
        &self,
        guard: &Arc<SyncGuard>,
        write: Write,
    ) -> Result<Wrote, StoreError> {
        let permit = guard.permit().await?;
        self.guarded(guard, permit, write).await
    }

    /// Runs `write` in a task of its own that holds `permit` and one connection until the
    /// server answers, however long its commit waits on a standby: the caller is answered
    /// by the deadline ([`SyncGuard::deadline`]), the connection never returns to the pool
    /// busy. A write that changed a row is then confirmed ([`confirm`]). A fresh
    /// insert whose answer nobody took (the caller gave up, or the deadline passed before
    /// its commit ended) is released by its own lease.
    ///
    /// Cost over the plain write: a task, and for a write that changed a row one more
    /// statement on its connection (plus one per 5 ms while the standbys lag).
    ///
    /// # Errors
    /// The write's own error; [`StoreError::Unavailable`] (outcome unknown) when it was not
    /// confirmed by the deadline.
    pub(crate) async fn guarded(
        &self,
        guard: &Arc<SyncGuard>,
        permit: OwnedSemaphorePermit,
        write: Write,
    ) -> Result<Wrote, StoreError> {
        let (tx, rx) = oneshot::channel();
        let task = self.clone().run_guarded(guard.clone(), write, tx);
        tokio::spawn(async move {
            task.await;
            drop(permit);
        });
        rx.await
            .unwrap_or_else(|_| Err(StoreError::Backend("the write's task ended".into())))
    }

    async fn run_guarded(self, guard: Arc<SyncGuard>, write: Write, tx: Reply) {
        let mut conn = match self.pool.acquire().await {
            Ok(conn) => conn,
            Err(e) => return drop(tx.send(Err(classify(e)))),
        };
        let started = Instant::now();
        let deadline = started + guard.deadline;
        let mut tx = Some(tx);
        let ran = {
            let run = self.write_on(&mut conn, &write);
            tokio::pin!(run);
            match self.watched(&guard, started, deadline, run.as_mut()).await {
                Some(done) => Ran::InTime(done),
                None => {
                    let reason = "its commit still waited for the standby at the deadline";
                    let e = unconfirmed(&self, &guard, &write, reason.into());
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(Err(e));
                    }
                    Ran::Late(run.await)
                }
            }
        };
        let ((wrote, changed), tx) = match (ran, tx) {
            (Ran::InTime(Ok(written)), Some(tx)) => (written, tx),
            (Ran::InTime(Err(e)), Some(tx)) => {
                if matches!(e, StoreError::LeaseLost) {
                    guard.settled(&write);
                }
                return drop(tx.send(Err(e)));
            }
            (Ran::Late(Ok((wrote, _))), _) => {
                return self.release_orphan(&mut conn, &guard, wrote).await
            }
            _ => return,
        };
        let answer = match changed {
            false => Ok(wrote),
            true => match self.confirmed(&mut conn, &guard, started, deadline).await {
                Ok(()) => Ok(wrote),
                Err(reason) => Err(unconfirmed(&self, &guard, &write, reason)),
            },
        };
        if answer.is_ok() {
            guard.settled(&write);
        }
        if let Err(Ok(wrote)) = tx.send(answer) {
            self.release_orphan(&mut conn, &guard, wrote).await;
        }
    }

    /// [`confirm`] on `conn`, watched for a stall like the write.
    async fn confirmed(
        &self,
        conn: &mut PgConnection,
        guard: &Arc<SyncGuard>,
        started: Instant,
        deadline: Instant,
    ) -> Result<(), String> {
        let confirm = confirm(conn, deadline);
        tokio::pin!(confirm);
        // The confirmation ends by itself at the deadline; the margin only caps a statement
        // that hangs.
        let cap = deadline + CONFIRM_MARGIN;
        let confirmed = self.watched(guard, started, cap, confirm).await;
        confirmed.unwrap_or_else(|| Err("reading the standbys' positions hung".into()))
    }

    /// Awaits `fut` up to `deadline`; once it has run [`STALL_AFTER`], has the server read
    /// again in the background (a stalled standby then refuses new keys).
    async fn watched<F: Future>(
        &self,
        guard: &Arc<SyncGuard>,
        started: Instant,
        deadline: Instant,
        mut fut: Pin<&mut F>,
    ) -> Option<F::Output> {
        let stall = started + STALL_AFTER;
        if Instant::now() < stall && stall < deadline {
            if let Ok(done) = tokio::time::timeout_at(stall, fut.as_mut()).await {
                return Some(done);
            }
            self.recheck_soon(guard);
        }
        tokio::time::timeout_at(deadline, fut).await.ok()
    }

    /// Reads the server again in the background (unless a read is under way) to update the
    /// refusal of new keys.
    fn recheck_soon(&self, guard: &Arc<SyncGuard>) {
        if guard.begin_recheck() {
            let (store, guard) = (self.clone(), guard.clone());
            tokio::spawn(async move {
                let read = store.read_server().await;
                guard.rechecked(read.ok().as_ref().map(refusal));
            });
        }
    }
}
