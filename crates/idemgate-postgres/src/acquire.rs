//! `acquire`: insert, else read, decide on the database clock, and take over or replace the
//! record by a conditional update; start over when the record changed in between.

use idemgate_core::engine::{decide, Decision, LeaseExpiredPolicy};
use idemgate_core::{AcquireOutcome, AcquireRequest, Lease, ScopedKey};
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::error::{PostgresStoreError, Result};
use crate::row;
use crate::store::{key_query, millis, PostgresStore};

/// How many insert-read-update rounds `acquire` tries before it reports
/// [`PostgresStoreError::Contention`]. Each failed round means another request changed the
/// record between this one's read and its update.
const MAX_ACQUIRE_ATTEMPTS: u32 = 64;

// === impl PostgresStore ===

impl PostgresStore {
    pub(crate) async fn acquire_inner(&self, req: &AcquireRequest) -> Result<AcquireOutcome> {
        for _ in 0..MAX_ACQUIRE_ATTEMPTS {
            let inserted = key_query(&self.sql.insert, &req.key)
                .bind(req.fingerprint.digest.as_slice())
                .bind(i32::from(req.fingerprint.version))
                .bind(req.token.0)
                .bind(millis(req.lease_ttl))
                .bind(millis(req.record_ttl))
                .fetch_optional(&self.pool)
                .await?;
            if let Some(row) = inserted {
                return acquired(req, &row, false);
            }
            let Some(row) = self.read(&req.key).await? else {
                continue; // released or purged since the insert: insert again
            };
            let (record, now) = row::record(&req.key, &row)?;
            // The core's rules on the database clock; the update re-checks them in SQL.
            let takeover = match decide(Some(&record), &req.fingerprint, now, &req.policy) {
                Decision::Insert => false,
                Decision::Takeover => true,
                _ => return Ok(AcquireOutcome::Existing { record, now }),
            };
            let updated = self.take(takeover, req, record.fence).await?;
            if let Some(row) = updated {
                return acquired(req, &row, takeover);
            }
            // the record changed since the read: start over
        }
        Err(PostgresStoreError::Contention {
            attempts: MAX_ACQUIRE_ATTEMPTS,
        })
    }

    pub(crate) async fn read(&self, key: &ScopedKey) -> Result<Option<PgRow>> {
        Ok(key_query(&self.sql.read, key)
            .fetch_optional(&self.pool)
            .await?)
    }

    /// Replaces the expired record (`takeover == false`) or takes over the record
    /// (`takeover == true`), if it still has the `fence` that was read and the rules still
    /// allow it. `None` when it changed meanwhile.
    async fn take(
        &self,
        takeover: bool,
        req: &AcquireRequest,
        fence: i64,
    ) -> Result<Option<PgRow>> {
        let query = |sql| {
            key_query(sql, &req.key)
                .bind(req.fingerprint.digest.as_slice())
                .bind(i32::from(req.fingerprint.version))
                .bind(req.token.0)
                .bind(millis(req.lease_ttl))
        };
        let query = if takeover {
            query(&self.sql.takeover)
                .bind(fence)
                .bind(millis(req.policy.max_lease))
                .bind(req.policy.lease_expired == LeaseExpiredPolicy::Takeover)
                .bind(req.policy.retry_failed)
        } else {
            query(&self.sql.reinsert_expired)
                .bind(millis(req.record_ttl))
                .bind(fence)
        };
        Ok(query.fetch_optional(&self.pool).await?)
    }
}

/// The outcome of a row `RETURNING fence, lease_expires_at`.
fn acquired(req: &AcquireRequest, row: &PgRow, takeover: bool) -> Result<AcquireOutcome> {
    let lease = Lease {
        key: req.key.clone(),
        fence: row.try_get(0)?,
        token: req.token,
        expires_at: row.try_get(1)?,
    };
    Ok(AcquireOutcome::Acquired { lease, takeover })
}
