//! `insert_or_get` and `take_over`: the two primitives that create a lease; and [`Write`],
//! every write of the store as one value, run on one connection by
//! [`PostgresStore::write_on`] (for `guarded` in `primitives.rs`).
//!
//! `insert_or_get` is one statement on the hot paths (a fresh key inserts, a live key is
//! returned); a key inserted concurrently after that statement's snapshot is read again in
//! a separate statement, and a record past its `expires_at` is replaced by a conditional
//! update on the fence that was read. When the record changes in between, it starts over.
//! All of them run on one connection.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use idemgate_core::{
    response_checksum, IdempotencyRecord, InsertOutcome, InsertRequest, Lease, LeaseToken,
    RecordState, ScopedKey, StoreError, StoredResponse, UnixMillis,
};
use sqlx::postgres::PgRow;
use sqlx::{Executor, PgConnection, Postgres, Row};
use tokio::time::Instant;

use crate::durability::confirm;
use crate::error::{classify, PostgresStoreError, Result};
use crate::primitives::{cas, held};
use crate::row::{self, ReadRow, READ_LEASE, RETURNED_LEASE};
use crate::store::{key_query, millis, PgQuery, PostgresStore};
use crate::sync::{SyncError, SyncGuard};

/// How many rounds `insert_or_get` tries before it reports
/// [`PostgresStoreError::Contention`]. Each failed round means another request changed the
/// record between this one's read and its write.
const MAX_INSERT_ATTEMPTS: u32 = 64;

// === impl PostgresStore ===

impl PostgresStore {
    /// `insert_or_get` on one pooled connection.
    pub(crate) async fn insert_or_get_inner(&self, req: &InsertRequest) -> Result<InsertOutcome> {
        let mut conn = self.pool.acquire().await?;
        self.insert_or_get_on(&mut conn, req).await
    }

    /// `insert_or_get` on `conn`.
    pub(crate) async fn insert_or_get_on(
        &self,
        conn: &mut PgConnection,
        req: &InsertRequest,
    ) -> Result<InsertOutcome> {
        for _ in 0..MAX_INSERT_ATTEMPTS {
            let query = insert_query(&self.sql.insert_or_read, req);
            let row = match conn.fetch_optional(query).await? {
                Some(row) => row,
                // Inserted concurrently after the snapshot: read it in a new statement.
                None => match conn
                    .fetch_optional(key_query(&self.sql.read, &req.key))
                    .await?
                {
                    Some(row) => row,
                    None => continue, // released or purged since: insert again
                },
            };
            if row.try_get::<bool, _>(0)? {
                let lease = row::lease(&req.key, req.token, &row, READ_LEASE)?;
                return Ok(InsertOutcome::Inserted(lease));
            }
            let read = row::decode(&req.key, &row)?;
            if !read.expired() {
                let now = read.now;
                let record = row::validate(read.raw)?;
                return Ok(InsertOutcome::Existing { record, now });
            }
            if let Some(lease) = self.replace_expired(&mut *conn, req, &read).await? {
                return Ok(InsertOutcome::Inserted(lease));
            }
            // the record changed since the read: start over
        }
        Err(PostgresStoreError::Contention {
            attempts: MAX_INSERT_ATTEMPTS,
        })
    }

    /// Reads the row stored for `key`, expired or not.
    pub(crate) async fn read(&self, key: &ScopedKey) -> Result<Option<PgRow>> {
        let query = key_query(&self.sql.read, key);
        Ok(self.pool.fetch_optional(query).await?)
    }

    /// Replaces the expired record `read` if it still has the fence that was read and is
    /// still expired; `None` when it changed meanwhile.
    async fn replace_expired(
        &self,
        conn: &mut PgConnection,
        req: &InsertRequest,
        read: &ReadRow,
    ) -> Result<Option<Lease>> {
        let Some(fence) = read.raw.fence else {
            // Not reachable (the column is NOT NULL); never replace what cannot be fenced.
            return row::validate(read.raw.clone()).map(|_| None);
        };
        let query = insert_query(&self.sql.replace_expired, req).bind(fence);
        let row = conn.fetch_optional(query).await?;
        row.map(|row| row::lease(&req.key, req.token, &row, RETURNED_LEASE))
            .transpose()
    }

    /// `insert_or_get` requiring synchronous replication. While new keys are refused
    /// ([`SyncGuard::refusing`]), the key is read (a read never waits for a standby): a live
    /// record is returned, none is refused. When no write permit is free, the key is read
    /// first too, so a replay is answered from the connections kept for reads, and only a
    /// fresh key waits for a permit. The insert itself runs under
    /// [`PostgresStore::guarded`].
    ///
    /// # Errors
    /// [`StoreError::Refused`] (nothing written) while new keys are refused (also when they
    /// become refused while the key waits for a permit);
    /// [`StoreError::Unavailable`] without a permit in time or when the insert was not
    /// confirmed; as `insert_or_get` otherwise.
    pub(crate) async fn insert_or_get_sync(
        &self,
        guard: &Arc<SyncGuard>,
        req: &InsertRequest,
    ) -> Result<InsertOutcome, StoreError> {
        self.recheck(guard).await;
        if let Some(reason) = guard.refusing() {
            return match self.existing(&req.key).await? {
                Some(found) => Ok(found),
                None => Err(StoreError::Refused(Box::new(SyncError::Refusing(reason)))),
            };
        }
        let permit = match guard.try_permit() {
            Some(permit) => permit,
            None => match self.existing(&req.key).await? {
                Some(found) => return Ok(found),
                None => guard.permit_for_new_key().await?,
            },
        };
        let write = Write::Insert(req.clone());
        self.guarded(guard, permit, write).await?.insert()
    }

    /// The live record of `key` as `insert_or_get` returns it, read without writing.
    pub(crate) async fn existing(&self, key: &ScopedKey) -> Result<Option<InsertOutcome>> {
        let Some(found) = self.read(key).await? else {
            return Ok(None);
        };
        let read = row::decode(key, &found)?;
        if read.expired() {
            return Ok(None);
        }
        let now = read.now;
        let record = row::validate(read.raw)?;
        Ok(Some(InsertOutcome::Existing { record, now }))
    }

    /// The compare-and-set of [`idemgate_core::IdempotencyStore::take_over`]: the record
    /// changes only if it still has `seen`'s fence, state and lease, and is live.
    pub(crate) async fn take_over_on<'c>(
        &self,
        executor: impl Executor<'c, Database = Postgres>,
        seen: &IdempotencyRecord,
        token: LeaseToken,
        lease_ttl: Duration,
    ) -> Result<Option<Lease>> {
        let query = key_query(&self.sql.take_over, &seen.key)
            .bind(token.0)
            .bind(millis(lease_ttl))
            .bind(seen.fence)
            .bind(seen.state.as_str())
            .bind(seen.lease_token.map(|t| t.0))
            .bind(seen.lease_expires_at);
        let row = executor.fetch_optional(query).await?;
        row.map(|row| row::lease(&seen.key, token, &row, RETURNED_LEASE))
            .transpose()
    }
}

/// `sql` with `req` bound as the parameters of [`crate::sql::Statements::insert_or_read`]:
/// key `$1..$3`, digest `$4`, fingerprint version `$5`, token `$6`, lease ms `$7`, TTL ms `$8`.
fn insert_query<'q>(sql: &'q str, req: &'q InsertRequest) -> PgQuery<'q> {
    key_query(sql, &req.key)
        .bind(req.fingerprint.digest.as_slice())
        .bind(i32::from(req.fingerprint.version))
        .bind(req.token.0)
        .bind(millis(req.lease_ttl))
        .bind(millis(req.record_ttl))
}

/// One write of the store, as [`PostgresStore::guarded`] runs it.
#[derive(Debug)]
pub(crate) enum Write {
    /// `insert_or_get`.
    Insert(InsertRequest),
    /// `take_over`.
    TakeOver {
        seen: IdempotencyRecord,
        token: LeaseToken,
        lease_ttl: Duration,
    },
    /// `renew`.
    Renew { lease: Lease, lease_ttl: Duration },
    /// `complete`.
    Complete {
        lease: Lease,
        response: StoredResponse,
    },
    /// `fail`.
    Fail(Lease),
    /// `release`.
    Release(Lease),
    /// `purge_expired`.
    Purge(NonZeroU32),
}

/// What a [`Write`] returned, by the write's kind; taken apart by the accessors below,
/// which answer [`StoreError::Backend`] for another kind (not reachable).
#[derive(Debug)]
pub(crate) enum Wrote {
    Insert(InsertOutcome),
    TakeOver(Option<Lease>),
    Renew(UnixMillis),
    /// `complete`, `fail` or `release` landed.
    Outcome,
    Purged(u64),
}

impl Write {
    /// The lease of an outcome write (`complete`, `fail`, `release`).
    pub(crate) fn outcome_lease(&self) -> Option<&Lease> {
        match self {
            Self::Complete { lease, .. } | Self::Fail(lease) | Self::Release(lease) => Some(lease),
            _ => None,
        }
    }

    /// The operation's name, for the metric and the log.
    pub(crate) fn op(&self) -> &'static str {
        match self {
            Self::Insert(_) => "insert_or_get",
            Self::TakeOver { .. } => "take_over",
            Self::Renew { .. } => "renew",
            Self::Complete { .. } => "complete",
            Self::Fail(_) => "fail",
            Self::Release(_) => "release",
            Self::Purge(_) => "purge_expired",
        }
    }
}

/// The error of a [`Wrote`] that is not what its [`Write`] returns (not reachable).
fn mismatch(wrote: Wrote) -> StoreError {
    StoreError::Backend(format!("unexpected result of a PostgreSQL write: {wrote:?}").into())
}

impl Wrote {
    pub(crate) fn insert(self) -> Result<InsertOutcome, StoreError> {
        match self {
            Self::Insert(outcome) => Ok(outcome),
            other => Err(mismatch(other)),
        }
    }

    pub(crate) fn take_over(self) -> Result<Option<Lease>, StoreError> {
        match self {
            Self::TakeOver(lease) => Ok(lease),
            other => Err(mismatch(other)),
        }
    }

    pub(crate) fn renew(self) -> Result<UnixMillis, StoreError> {
        match self {
            Self::Renew(expiry) => Ok(expiry),
            other => Err(mismatch(other)),
        }
    }

    pub(crate) fn outcome(self) -> Result<(), StoreError> {
        match self {
            Self::Outcome => Ok(()),
            other => Err(mismatch(other)),
        }
    }

    pub(crate) fn purged(self) -> Result<u64, StoreError> {
        match self {
            Self::Purged(n) => Ok(n),
            other => Err(mismatch(other)),
        }
    }
}

impl PostgresStore {
    /// Runs `write` on `conn`: what it returned, and whether it changed a row (a write to
    /// confirm). The retry of an outcome write answered unconfirmed
    /// ([`SyncGuard::remember`]) whose compare-and-set changes nothing but whose row is
    /// already in the state it writes counts as changed, so it is confirmed instead of
    /// answered [`StoreError::LeaseLost`].
    pub(crate) async fn write_on(
        &self,
        conn: &mut PgConnection,
        write: &Write,
    ) -> Result<(Wrote, bool), StoreError> {
        let (done, lease) = match write {
            Write::Insert(req) => {
                let outcome = self.insert_or_get_on(conn, req).await?;
                let changed = matches!(outcome, InsertOutcome::Inserted(_));
                return Ok((Wrote::Insert(outcome), changed));
            }
            Write::TakeOver {
                seen,
                token,
                lease_ttl,
            } => {
                let lease = self.take_over_on(conn, seen, *token, *lease_ttl).await?;
                let changed = lease.is_some();
                return Ok((Wrote::TakeOver(lease), changed));
            }
            Write::Renew { lease, lease_ttl } => {
                // Confirmed too: a renewal lost in a failover would let the lease lapse
                // early on the new primary, and a take-over run the operation again.
                let expiry = self.renew_on(conn, lease, *lease_ttl).await?;
                return Ok((Wrote::Renew(expiry), true));
            }
            Write::Purge(batch) => {
                return Ok((Wrote::Purged(self.purge_on(conn, *batch).await?), false))
            }
            Write::Complete { lease, response } => {
                (self.complete_on(&mut *conn, lease, response).await, lease)
            }
            Write::Fail(lease) => (held(conn.execute(cas(&self.sql.fail, lease)).await), lease),
            Write::Release(lease) => (
                held(conn.execute(cas(&self.sql.release, lease)).await),
                lease,
            ),
        };
        match done {
            Err(StoreError::LeaseLost)
                if self.sync.as_ref().is_some_and(|g| g.was_unconfirmed(lease))
                    && self.already_written(conn, write, lease).await? =>
            {
                Ok((Wrote::Outcome, true))
            }
            done => done.map(|()| (Wrote::Outcome, true)),
        }
    }

    /// Whether the row of `lease` is already what the outcome `write` writes: `completed`
    /// at the lease's fence with the same response checksum, `failed` at its fence, or gone
    /// (a release).
    async fn already_written(
        &self,
        conn: &mut PgConnection,
        write: &Write,
        lease: &Lease,
    ) -> Result<bool, StoreError> {
        let query = key_query(&self.sql.read, &lease.key);
        let Some(found) = conn.fetch_optional(query).await.map_err(classify)? else {
            return Ok(matches!(write, Write::Release(_)));
        };
        let raw = row::decode(&lease.key, &found)?.raw;
        let at_fence = raw.fence == Some(lease.fence);
        Ok(match write {
            Write::Complete { response, .. } => {
                let checksum = response_checksum(&lease.key, response);
                at_fence
                    && raw.state.as_deref() == Some(RecordState::Completed.as_str())
                    && raw.checksum.as_deref() == Some(checksum.as_slice())
            }
            Write::Fail(_) => {
                at_fence && raw.state.as_deref() == Some(RecordState::Failed.as_str())
            }
            _ => false,
        })
    }

    /// Releases the record of a fresh insert whose lease nobody received (other writes need
    /// nothing), waiting as long as its commit does.
    pub(crate) async fn release_orphan(
        &self,
        conn: &mut PgConnection,
        guard: &SyncGuard,
        wrote: Wrote,
    ) {
        let Wrote::Insert(InsertOutcome::Inserted(lease)) = wrote else {
            return;
        };
        let released = match self.write_on(conn, &Write::Release(lease)).await {
            Ok(_) => confirm(conn, Instant::now() + guard.deadline).await,
            // Released or taken over meanwhile: nothing of it is left to release.
            Err(StoreError::LeaseLost) => return,
            Err(e) => Err(e.to_string()),
        };
        match released {
            Ok(()) => tracing::info!("released the record of an insert whose answer was lost"),
            Err(reason) => {
                tracing::warn!(%reason, "the record of an insert whose answer was lost was not released")
            }
        }
    }
}
