//! The [`IdempotencyStore`] primitives of [`PostgresStore`]: each one statement (see
//! `sql.rs`), a compare-and-set wherever it writes.

use std::num::NonZeroU32;
use std::time::Duration;

use idemgate_core::{
    response_checksum, IdempotencyRecord, IdempotencyStore, InsertOutcome, InsertRequest, Lease,
    LeaseToken, ScopedKey, StoreError, StoredResponse, UnixMillis,
};
use sqlx::postgres::PgQueryResult;
use sqlx::{Executor, Postgres, Row};

use crate::error::classify;
use crate::row;
use crate::store::{key_query, millis, PgQuery, PostgresStore};

/// `sql` with the compare-and-set parameters bound: key `$1..$3`, fence `$4`, token `$5`.
fn cas<'q>(sql: &'q str, lease: &'q Lease) -> PgQuery<'q> {
    key_query(sql, &lease.key)
        .bind(lease.fence)
        .bind(lease.token.0)
}

/// `Ok` if the compare-and-set changed the row, else [`StoreError::LeaseLost`].
fn held(done: PgQueryResult) -> Result<(), StoreError> {
    match done.rows_affected() {
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
        held(executor.execute(query).await.map_err(classify)?)
    }
}

// === impl IdempotencyStore for PostgresStore ===

impl IdempotencyStore for PostgresStore {
    /// One `WITH ins AS (INSERT ... ON CONFLICT DO NOTHING RETURNING ...) SELECT ...`
    /// statement inserts a fresh key or returns the live record (no lock taken). A key
    /// inserted concurrently after that statement's snapshot is read in a separate
    /// statement; a record past its `expires_at` is replaced (fence + 1) by an update
    /// conditional on the fence read. If the record changed or vanished in between, it
    /// starts over.
    async fn insert_or_get(&self, req: &InsertRequest) -> Result<InsertOutcome, StoreError> {
        Ok(self.insert_or_get_inner(req).await?)
    }

    /// One `UPDATE ... WHERE` fence, state, lease token and lease expiry are still `seen`'s
    /// (`IS NOT DISTINCT FROM`) and the record is live.
    async fn take_over(
        &self,
        seen: &IdempotencyRecord,
        token: LeaseToken,
        lease_ttl: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        Ok(self.take_over_inner(seen, token, lease_ttl).await?)
    }

    async fn renew(&self, lease: &Lease, lease_ttl: Duration) -> Result<UnixMillis, StoreError> {
        let query = cas(&self.sql.renew, lease).bind(millis(lease_ttl));
        let row = self.pool.fetch_optional(query).await.map_err(classify)?;
        match row {
            Some(row) => row.try_get(0).map_err(classify),
            None => Err(StoreError::LeaseLost),
        }
    }

    async fn complete(&self, lease: &Lease, response: &StoredResponse) -> Result<(), StoreError> {
        self.complete_on(&self.pool, lease, response).await
    }

    async fn fail(&self, lease: &Lease) -> Result<(), StoreError> {
        let query = cas(&self.sql.fail, lease);
        held(self.pool.execute(query).await.map_err(classify)?)
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        let query = cas(&self.sql.release, lease);
        held(self.pool.execute(query).await.map_err(classify)?)
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
    async fn purge_expired(&self, batch: NonZeroU32) -> Result<u64, StoreError> {
        let query = sqlx::query(&self.sql.purge).bind(i64::from(batch.get()));
        let done = self.pool.execute(query).await.map_err(classify)?;
        Ok(done.rows_affected())
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
