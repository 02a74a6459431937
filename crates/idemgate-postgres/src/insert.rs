//! `insert_or_get` and `take_over`: the two primitives that create a lease.
//!
//! `insert_or_get` is one statement on the hot paths (a fresh key inserts, a live key is
//! returned); a key inserted concurrently after that statement's snapshot is read again in
//! a separate statement, and a record past its `expires_at` is replaced by a conditional
//! update on the fence that was read. When the record changes in between, it starts over.

use std::time::Duration;

use idemgate_core::{
    IdempotencyRecord, InsertOutcome, InsertRequest, Lease, LeaseToken, ScopedKey,
};
use sqlx::postgres::PgRow;
use sqlx::{Executor, Row};

use crate::error::{PostgresStoreError, Result};
use crate::row::{self, ReadRow, READ_LEASE, RETURNED_LEASE};
use crate::store::{key_query, millis, PostgresStore};

/// How many rounds `insert_or_get` tries before it reports
/// [`PostgresStoreError::Contention`]. Each failed round means another request changed the
/// record between this one's read and its write.
const MAX_INSERT_ATTEMPTS: u32 = 64;

// === impl PostgresStore ===

impl PostgresStore {
    pub(crate) async fn insert_or_get_inner(&self, req: &InsertRequest) -> Result<InsertOutcome> {
        for _ in 0..MAX_INSERT_ATTEMPTS {
            let row = match self.insert_or_read(req).await? {
                Some(row) => row,
                // Inserted concurrently after the snapshot: read it in a new statement.
                None => match self.read(&req.key).await? {
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
            if let Some(lease) = self.replace_expired(req, &read).await? {
                return Ok(InsertOutcome::Inserted(lease));
            }
            // the record changed since the read: start over
        }
        Err(PostgresStoreError::Contention {
            attempts: MAX_INSERT_ATTEMPTS,
        })
    }

    /// The insert-or-read statement: `None` when it neither inserted nor saw the key.
    async fn insert_or_read(&self, req: &InsertRequest) -> Result<Option<PgRow>> {
        let query = key_query(&self.sql.insert_or_read, &req.key)
            .bind(req.fingerprint.digest.as_slice())
            .bind(i32::from(req.fingerprint.version))
            .bind(req.token.0)
            .bind(millis(req.lease_ttl))
            .bind(millis(req.record_ttl));
        Ok(self.pool.fetch_optional(query).await?)
    }

    /// Reads the row stored for `key`, expired or not.
    pub(crate) async fn read(&self, key: &ScopedKey) -> Result<Option<PgRow>> {
        Ok(self
            .pool
            .fetch_optional(key_query(&self.sql.read, key))
            .await?)
    }

    /// Replaces the expired record `read` if it still has the fence that was read and is
    /// still expired; `None` when it changed meanwhile.
    async fn replace_expired(&self, req: &InsertRequest, read: &ReadRow) -> Result<Option<Lease>> {
        let Some(fence) = read.raw.fence else {
            // Not reachable (the column is NOT NULL); never replace what cannot be fenced.
            return row::validate(read.raw.clone()).map(|_| None);
        };
        let query = key_query(&self.sql.replace_expired, &req.key)
            .bind(req.fingerprint.digest.as_slice())
            .bind(i32::from(req.fingerprint.version))
            .bind(req.token.0)
            .bind(millis(req.lease_ttl))
            .bind(millis(req.record_ttl))
            .bind(fence);
        let row = self.pool.fetch_optional(query).await?;
        row.map(|row| row::lease(&req.key, req.token, &row, RETURNED_LEASE))
            .transpose()
    }

    /// The compare-and-set of [`idemgate_core::IdempotencyStore::take_over`]: the record
    /// changes only if it still has `seen`'s fence, state and lease, and is live.
    pub(crate) async fn take_over_inner(
        &self,
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
        let row = self.pool.fetch_optional(query).await?;
        row.map(|row| row::lease(&seen.key, token, &row, RETURNED_LEASE))
            .transpose()
    }
}
