//! The [`IdempotencyStore`] primitives of [`PostgresStore`]: each one statement (see
//! `sql.rs`), a compare-and-set wherever it writes. With
//! [`crate::PostgresOptions::with_require_synchronous_replication`], every write goes
//! through [`PostgresStore::guarded`] (below): a write permit, a task of its own, and the
//! confirmation that the synchronous standbys have it (`sync.rs`). [`Write`] names such a
//! write and [`PostgresStore::write_on`] runs it on one connection (`insert.rs`).

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use idemgate_core::{
    response_checksum, IdempotencyRecord, IdempotencyStore, InsertOutcome, InsertRequest, Lease,
    LeaseToken, ScopedKey, StoreError, StoredResponse, UnixMillis,
};
use sqlx::postgres::PgQueryResult;
use sqlx::{Executor, PgConnection, Postgres, Row};
use tokio::sync::{oneshot, OwnedSemaphorePermit};
use tokio::time::Instant;

use crate::durability::{confirm, refusal};
use crate::error::classify;
use crate::insert::{Write, Wrote};
use crate::row;
use crate::store::{key_query, millis, PgQuery, PostgresStore};
use crate::sync::{SyncError, SyncGuard, STALL_AFTER};

/// `sql` with the compare-and-set parameters bound: key `$1..$3`, fence `$4`, token `$5`.
pub(crate) fn cas<'q>(sql: &'q str, lease: &'q Lease) -> PgQuery<'q> {
    key_query(sql, &lease.key)
        .bind(lease.fence)
        .bind(lease.token.0)
}

/// `Ok` if the compare-and-set changed the row, else [`StoreError::LeaseLost`].
pub(crate) fn held(done: Result<PgQueryResult, sqlx::Error>) -> Result<(), StoreError> {
    match done.map_err(classify)?.rows_affected() {
        0 => Err(StoreError::LeaseLost),
        _ => Ok(()),
    }
}

// === impl PostgresStore ===

impl PostgresStore {
    /// The complete compare-and-set on `executor` (the pool, or a caller's transaction):
    /// the response, its checksum and the fence the checksum was written at.
    pub(crate) async fn complete_on<'c>(
        &self,
        executor: impl Executor<'c, Database = Postgres>,
        lease: &Lease,
        response: &StoredResponse,
    ) -> Result<(), StoreError> {
        let headers = response.encode_headers();
        let checksum = response_checksum(&lease.key, response);
        // An empty body is bound as an empty slice: stored as empty bytea, never NULL.
        let query = cas(&self.sql.complete, lease)
            .bind(i32::from(response.status))
            .bind(headers.as_slice())
            .bind(response.body.as_ref())
            .bind(response.replayable)
            .bind(checksum.as_slice());
        // `Executor::execute` (a boxed future), so callers can spawn this future.
        held(executor.execute(query).await)
    }

    pub(crate) async fn renew_on<'c>(
        &self,
        executor: impl Executor<'c, Database = Postgres>,
        lease: &Lease,
        lease_ttl: Duration,
    ) -> Result<UnixMillis, StoreError> {
        let query = cas(&self.sql.renew, lease).bind(millis(lease_ttl));
        let row = executor.fetch_optional(query).await.map_err(classify)?;
        row.ok_or(StoreError::LeaseLost)?
            .try_get(0)
            .map_err(classify)
    }

    pub(crate) async fn purge_on<'c>(
        &self,
        executor: impl Executor<'c, Database = Postgres>,
        batch: NonZeroU32,
    ) -> Result<u64, StoreError> {
        let query = sqlx::query(&self.sql.purge).bind(i64::from(batch.get()));
        let done = executor.execute(query).await.map_err(classify)?;
        Ok(done.rows_affected())
    }
}

// === impl IdempotencyStore for PostgresStore ===

impl IdempotencyStore for PostgresStore {
    /// One `WITH ins AS (INSERT ... ON CONFLICT DO NOTHING RETURNING ...) SELECT ...`
    /// statement inserts a fresh key or returns the live record (no lock taken). A key
    /// inserted concurrently after that statement's snapshot is read in a separate
    /// statement; a record past its `expires_at` is replaced (fence + 1) by an update
    /// conditional on the fence read. If the record changed or vanished in between, it
    /// starts over. Requiring synchronous replication, see `insert_or_get_sync`.
    async fn insert_or_get(&self, req: &InsertRequest) -> Result<InsertOutcome, StoreError> {
        match &self.sync {
            Some(guard) => self.insert_or_get_sync(guard, req).await,
            None => Ok(self.insert_or_get_inner(req).await?),
        }
    }

    /// One `UPDATE ... WHERE` fence, state, lease token and lease expiry are still `seen`'s
    /// (`IS NOT DISTINCT FROM`) and the record is live. Requiring synchronous replication,
    /// it is refused like a new key while new keys are.
    async fn take_over(
        &self,
        seen: &IdempotencyRecord,
        token: LeaseToken,
        lease_ttl: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        let Some(guard) = &self.sync else {
            return Ok(self
                .take_over_on(&self.pool, seen, token, lease_ttl)
                .await?);
        };
        guard.refuse_if_refusing()?;
        let write = Write::TakeOver {
            seen: seen.clone(),
            token,
            lease_ttl,
        };
        self.guarded_write(guard, write).await?.take_over()
    }

    async fn renew(&self, lease: &Lease, lease_ttl: Duration) -> Result<UnixMillis, StoreError> {
        let Some(guard) = &self.sync else {
            return self.renew_on(&self.pool, lease, lease_ttl).await;
        };
        let write = Write::Renew {
            lease: lease.clone(),
            lease_ttl,
        };
        self.guarded_write(guard, write).await?.renew()
    }

    async fn complete(&self, lease: &Lease, response: &StoredResponse) -> Result<(), StoreError> {
        let Some(guard) = &self.sync else {
            return self.complete_on(&self.pool, lease, response).await;
        };
        let write = Write::Complete {
            lease: lease.clone(),
            response: response.clone(),
        };
        self.guarded_write(guard, write).await?.outcome()
    }

    async fn fail(&self, lease: &Lease) -> Result<(), StoreError> {
        match &self.sync {
            Some(guard) => self
                .guarded_write(guard, Write::Fail(lease.clone()))
                .await?
                .outcome(),
            None => held(self.pool.execute(cas(&self.sql.fail, lease)).await),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        match &self.sync {
            Some(guard) => {
                let write = Write::Release(lease.clone());
                self.guarded_write(guard, write).await?.outcome()
            }
            None => held(self.pool.execute(cas(&self.sql.release, lease)).await),
        }
    }

    async fn get(&self, key: &ScopedKey) -> Result<Option<IdempotencyRecord>, StoreError> {
        let Some(found) = self.read(key).await? else {
            return Ok(None);
        };
        let read = row::decode(key, &found)?;
        if read.expired() {
            return Ok(None);
        }
        Ok(Some(row::validate(read.raw)?))
    }

    /// Deletes up to `batch` expired rows in one statement that locks only those rows and
    /// skips rows other transactions hold; a row re-inserted meanwhile is not deleted.
    /// Requiring synchronous replication, it holds a write permit (its commit waits for
    /// the standby too) and is not confirmed.
    async fn purge_expired(&self, batch: NonZeroU32) -> Result<u64, StoreError> {
        match &self.sync {
            Some(guard) => self
                .guarded_write(guard, Write::Purge(batch))
                .await?
                .purged(),
            None => self.purge_on(&self.pool, batch).await,
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.pool
            .execute(sqlx::query("SELECT 1"))
            .await
            .map_err(classify)?;
        Ok(())
    }

    fn backend(&self) -> &'static str {
        "postgres"
    }
}

// === the runner of writes that must reach the synchronous standbys ===

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
