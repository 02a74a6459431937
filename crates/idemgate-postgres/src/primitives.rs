//! The [`IdempotencyStore`] primitives of [`PostgresStore`]: each one statement (see
//! `sql.rs`), a compare-and-set wherever it writes. With
//! [`crate::PostgresOptions::with_require_synchronous_replication`], every write goes
//! through [`PostgresStore::guarded`] (`guarded.rs`): a write permit, a task of its own, and
//! the confirmation that the synchronous standbys have it (`sync.rs`). [`Write`] names such a
//! write and [`PostgresStore::write_on`] runs it on one connection (`insert.rs`).

use std::num::NonZeroU32;
use std::time::Duration;

use idemgate_core::events::{EventSink, KeyEvent};
use idemgate_core::{
    response_checksum, IdempotencyRecord, IdempotencyStore, InsertOutcome, InsertRequest, Lease,
    LeaseToken, ScopedKey, StoreError, StoredResponse, UnixMillis,
};
use sqlx::postgres::PgQueryResult;
use sqlx::{Executor, Postgres, Row};

use crate::error::classify;
use crate::insert::Write;
use crate::row;
use crate::store::{key_query, millis, PgQuery, PostgresStore};

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
            .bind(checksum.as_slice())
            .bind(response.sealed_by.map(|id| id.to_string()));
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

impl PostgresStore {
    /// `insert_or_get` without the forward journal.
    pub(crate) async fn insert_or_get_direct(
        &self,
        req: &InsertRequest,
    ) -> Result<InsertOutcome, StoreError> {
        match &self.sync {
            Some(guard) => self.insert_or_get_sync(guard, req).await,
            None => Ok(self.insert_or_get_inner(req).await?),
        }
    }

    /// `complete` (with `response`) or `fail` (without), without the forward journal.
    pub(crate) async fn outcome_direct(
        &self,
        lease: &Lease,
        response: Option<&StoredResponse>,
    ) -> Result<(), StoreError> {
        match (&self.sync, response) {
            (None, Some(response)) => self.complete_on(&self.pool, lease, response).await,
            (None, None) => held(self.pool.execute(cas(&self.sql.fail, lease)).await),
            (Some(guard), response) => {
                let write = match response {
                    Some(response) => Write::Complete {
                        lease: lease.clone(),
                        response: response.clone(),
                    },
                    None => Write::Fail(lease.clone()),
                };
                self.guarded_write(guard, write).await?.outcome()
            }
        }
    }

    /// The live record of `key`, never held (the journal's own reads).
    pub(crate) async fn get_direct(
        &self,
        key: &ScopedKey,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let Some(found) = self.read(key).await? else {
            return Ok(None);
        };
        let read = row::decode(key, &found)?;
        if read.expired() {
            return Ok(None);
        }
        Ok(Some(row::validate(read.raw)?))
    }

    /// `release` without the forward journal.
    pub(crate) async fn release_direct(&self, lease: &Lease) -> Result<(), StoreError> {
        match &self.sync {
            Some(guard) => {
                let write = Write::Release(lease.clone());
                self.guarded_write(guard, write).await?.outcome()
            }
            None => held(self.pool.execute(cas(&self.sql.release, lease)).await),
        }
    }

    /// `take_over` without the forward journal.
    pub(crate) async fn take_over_direct(
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
}

// === impl IdempotencyStore for PostgresStore ===

impl IdempotencyStore for PostgresStore {
    /// One `WITH ins AS (INSERT ... ON CONFLICT DO NOTHING RETURNING ...) SELECT ...`
    /// statement inserts a fresh key or returns the live record (no lock taken). A key
    /// inserted concurrently after that statement's snapshot is read in a separate
    /// statement; a record past its `expires_at` is replaced (fence + 1) by an update
    /// conditional on the fence read. If the record changed or vanished in between, it
    /// starts over. Requiring synchronous replication, see `insert_or_get_sync`.
    /// With a forward journal, see `journal/hooks.rs`.
    async fn insert_or_get(&self, req: &InsertRequest) -> Result<InsertOutcome, StoreError> {
        match &self.journal {
            Some(link) => self.insert_or_get_journaled(&link.journal, req).await,
            None => self.insert_or_get_direct(req).await,
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
        match &self.journal {
            Some(link) => {
                self.take_over_journaled(&link.journal, seen, token, lease_ttl)
                    .await
            }
            None => self.take_over_direct(seen, token, lease_ttl).await,
        }
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

    /// With a forward journal, see `journal/hooks.rs`.
    async fn complete(&self, lease: &Lease, response: &StoredResponse) -> Result<(), StoreError> {
        match &self.journal {
            Some(link) => {
                self.outcome_journaled(&link.journal, lease, Some(response))
                    .await
            }
            None => self.outcome_direct(lease, Some(response)).await,
        }
    }

    async fn fail(&self, lease: &Lease) -> Result<(), StoreError> {
        match &self.journal {
            Some(link) => self.outcome_journaled(&link.journal, lease, None).await,
            None => self.outcome_direct(lease, None).await,
        }
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        let released = self.release_direct(lease).await;
        if matches!(released, Ok(()) | Err(StoreError::LeaseLost)) {
            self.journal_released(lease);
        }
        released
    }

    /// The live record, unless the forward journal holds it while a failover is handled
    /// ([`StoreError::Refused`]: a waiter's watcher reads again).
    async fn get(&self, key: &ScopedKey) -> Result<Option<IdempotencyRecord>, StoreError> {
        let record = self.get_direct(key).await?;
        match (&self.journal, record) {
            (Some(link), Some(record)) => link.journal.unless_held(record),
            (_, record) => Ok(record),
        }
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

    /// `pg_notify` on the table's channel (`events.rs`).
    async fn announce(&self, event: &KeyEvent) -> Result<(), StoreError> {
        self.notify(event).await
    }

    /// `LISTEN` on the table's channel, on a connection of its own (`events.rs`).
    async fn listen(&self, sink: EventSink) {
        self.listen_events(sink).await
    }

    /// Events come by `NOTIFY`: the poll only covers a lost one (a failover, a broken
    /// listener).
    fn event_poll(&self) -> Duration {
        Duration::from_secs(2)
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
