//! [`GaugedStore`] for [`SqliteStore`]: exact counts from one scan of the table.

use std::num::NonZeroU32;

use idemgate_core::gauges::{GaugedStore, StoreGauges};
use idemgate_core::{now_millis, StoreError};
use rusqlite::Connection;

use crate::error::Result;
use crate::SqliteStore;

/// One scan: per state, the record count, body bytes, oldest `created_at`, expired and
/// stuck `in_progress` counts.
const GAUGES: &str = "SELECT state, count(*), total(length(response_body)), min(created_at),
    total(expires_at <= ?1),
    total(state = 'in_progress' AND expires_at > ?1
          AND (lease_expires_at IS NULL OR lease_expires_at <= ?1))
    FROM idempotency_records GROUP BY state";

/// Uses the `expires_at` index; stops counting at `?2`.
const COUNT_EXPIRED: &str = "SELECT count(*) FROM
    (SELECT 1 FROM idempotency_records WHERE expires_at <= ?1 LIMIT ?2)";

fn gauges(conn: &Connection) -> Result<StoreGauges> {
    let now = now_millis();
    let mut g = StoreGauges {
        now,
        expired: Some(0),
        body_bytes: Some(0),
        ..StoreGauges::default()
    };
    let mut stmt = conn.prepare_cached(GAUGES)?;
    let mut rows = stmt.query([now])?;
    while let Some(r) = rows.next()? {
        let state: String = r.get(0)?;
        let n = r.get::<_, i64>(1)? as u64;
        match state.as_str() {
            "in_progress" => g.in_progress += n,
            "completed" => g.completed += n,
            _ => g.failed += n,
        }
        g.body_bytes = Some(g.body_bytes.unwrap_or(0) + r.get::<_, f64>(2)? as u64);
        if let Some(c) = r.get::<_, Option<i64>>(3)? {
            g.oldest_created_at = Some(g.oldest_created_at.map_or(c, |o| o.min(c)));
        }
        g.expired = Some(g.expired.unwrap_or(0) + r.get::<_, f64>(4)? as u64);
        g.stuck_in_progress += r.get::<_, f64>(5)? as u64;
    }
    Ok(g)
}

impl GaugedStore for SqliteStore {
    /// Exact. One scan of the table (O(rows)) on a read-only connection, so it never delays
    /// store operations; call it at metrics intervals, not per request.
    async fn gauges(&self) -> Result<StoreGauges, StoreError> {
        self.read(gauges).await
    }

    /// An index range scan over `expires_at`, stopped at `limit`.
    async fn count_expired(&self, limit: NonZeroU32) -> Result<Option<u64>, StoreError> {
        self.read(move |c| {
            let n: i64 = c
                .prepare_cached(COUNT_EXPIRED)?
                .query_row(rusqlite::params![now_millis(), limit.get()], |r| r.get(0))?;
            Ok(Some(n as u64))
        })
        .await
    }
}
