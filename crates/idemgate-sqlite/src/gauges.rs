//! [`GaugedStore`] for [`SqliteStore`], the one count of `idemgate stats` and the gauges:
//! exact from one scan of a small table; on a large one, bounded reads of its indexes and a
//! sample of its rows (marked approximate), cheap enough for every metrics interval at any
//! size.

use std::num::NonZeroU32;

use idemgate_core::gauges::{GaugedStore, StoreCount};
use idemgate_core::{now_millis, Durability, DurabilityLevel, RecordState, StoreError, UnixMillis};
use rusqlite::{params, Connection, Row};

use crate::error::Result;
use crate::{SqliteStore, Synchronous};

/// Below this many records the gauges scan the table and count everything exactly; from
/// this many on they read only indexes and a sample (see [`SqliteStore::gauges`]).
pub const EXACT_COUNT_BELOW: i64 = 100_000;

/// On a large table the expired count stops here, so a huge backlog costs a bounded index
/// scan.
pub const EXPIRED_COUNT_CAP: i64 = 1_000_000;

/// Windows of consecutive rowids counted to estimate a large table's records, and their
/// width: 16,384 rowids looked up at most.
const SAMPLE_WINDOWS: i64 = 16;
const SAMPLE_WIDTH: i64 = 1024;

/// One scan: per state, the record count, body bytes, oldest `created_at`, expired and
/// stuck `in_progress` counts.
const GAUGES: &str = "SELECT state, count(*), total(length(response_body)), min(created_at),
    total(expires_at <= ?1),
    total(state = 'in_progress' AND expires_at > ?1
          AND (lease_expires_at IS NULL OR lease_expires_at <= ?1))
    FROM idempotency_records GROUP BY state";

/// Counts records up to `?1`, through the smallest index.
const PROBE: &str = "SELECT count(*) FROM (SELECT 1 FROM idempotency_records LIMIT ?1)";

/// The records not settled, per state, with the stuck ones: through the partial index of
/// migration 0003 (its `WHERE` term is repeated so the planner can use it).
const UNSETTLED: &str = "SELECT state, count(*),
    total(state = 'in_progress' AND expires_at > ?1
          AND (lease_expires_at IS NULL OR lease_expires_at <= ?1))
    FROM idempotency_records WHERE state <> 'completed' GROUP BY state";

/// The first and last rowid (two seeks at the ends of the table's b-tree).
const ROWIDS: &str = "SELECT (SELECT min(rowid) FROM idempotency_records),
    (SELECT max(rowid) FROM idempotency_records)";

/// Records with a rowid in `?1..=?2`.
const WINDOW: &str = "SELECT count(*) FROM idempotency_records WHERE rowid BETWEEN ?1 AND ?2";

/// The oldest `created_at` among the 1000 records next to expire.
const OLDEST: &str = "SELECT min(created_at) FROM
    (SELECT created_at FROM idempotency_records ORDER BY expires_at LIMIT 1000)";

/// Uses the `expires_at` index; stops counting at `?2`.
const COUNT_EXPIRED: &str = "SELECT count(*) FROM
    (SELECT 1 FROM idempotency_records WHERE expires_at <= ?1 LIMIT ?2)";

/// The gauges, exact below `exact_below` records, else from indexes and a sample.
pub(crate) fn gauges(conn: &Connection, exact_below: i64) -> Result<StoreCount> {
    let now = now_millis();
    let probed: i64 = conn
        .prepare_cached(PROBE)?
        .query_row([exact_below], |r| r.get(0))?;
    if probed < exact_below {
        exact(conn, now)
    } else {
        sampled(conn, now)
    }
}

/// Counts the records of one `state, count(*)` row (columns 0 and 1; a NULL or unknown
/// state is corrupt) in `g`.
fn add_state(g: &mut StoreCount, r: &Row<'_>) -> rusqlite::Result<()> {
    let (state, n) = (r.get::<_, Option<String>>(0)?, r.get::<_, i64>(1)? as u64);
    match state.as_deref().and_then(RecordState::parse) {
        Some(RecordState::InProgress) => g.in_progress += n,
        Some(RecordState::Completed) => g.completed += n,
        Some(RecordState::Failed) => g.failed += n,
        None => g.unknown_state += n,
    }
    Ok(())
}

fn exact(conn: &Connection, now: UnixMillis) -> Result<StoreCount> {
    let mut g = StoreCount {
        now,
        expired: Some(0),
        body_bytes: Some(0),
        ..StoreCount::default()
    };
    let mut stmt = conn.prepare_cached(GAUGES)?;
    let mut rows = stmt.query([now])?;
    while let Some(r) = rows.next()? {
        add_state(&mut g, r)?;
        g.body_bytes = Some(g.body_bytes.unwrap_or(0) + r.get::<_, f64>(2)? as u64);
        if let Some(c) = r.get::<_, Option<i64>>(3)? {
            g.oldest_created_at = Some(g.oldest_created_at.map_or(c, |o| o.min(c)));
        }
        g.expired = Some(g.expired.unwrap_or(0) + r.get::<_, f64>(4)? as u64);
        g.stuck_in_progress += r.get::<_, f64>(5)? as u64;
    }
    Ok(g)
}

/// `in_progress`, `failed` and stuck exactly (the partial index); `completed` as the
/// estimated total less those; expired up to [`EXPIRED_COUNT_CAP`]; the oldest among the
/// records next to expire; no body bytes.
fn sampled(conn: &Connection, now: UnixMillis) -> Result<StoreCount> {
    let mut g = StoreCount {
        now,
        approximate: true,
        ..StoreCount::default()
    };
    let mut stmt = conn.prepare_cached(UNSETTLED)?;
    let mut rows = stmt.query([now])?;
    while let Some(r) = rows.next()? {
        add_state(&mut g, r)?;
        g.stuck_in_progress += r.get::<_, f64>(2)? as u64;
    }
    let total = estimated_records(conn)?;
    g.completed = total.saturating_sub(g.in_progress + g.failed + g.unknown_state);
    g.oldest_created_at = conn.prepare_cached(OLDEST)?.query_row([], |r| r.get(0))?;
    let expired: i64 = conn
        .prepare_cached(COUNT_EXPIRED)?
        .query_row(params![now, EXPIRED_COUNT_CAP], |r| r.get(0))?;
    g.expired = Some(expired as u64);
    Ok(g)
}

/// The records of a large table: the span of its rowids times the share of them still in
/// use, counted in [`SAMPLE_WINDOWS`] windows spread evenly over the span. Exact while rows
/// are packed (rowids are handed out in order and the purge deletes the oldest first).
fn estimated_records(conn: &Connection) -> Result<u64> {
    let (first, last): (Option<i64>, Option<i64>) = conn
        .prepare_cached(ROWIDS)?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let (Some(first), Some(last)) = (first, last) else {
        return Ok(0);
    };
    let span = last.saturating_sub(first).saturating_add(1);
    let mut window = conn.prepare_cached(WINDOW)?;
    let mut count =
        |from: i64, to: i64| -> Result<i64> { Ok(window.query_row([from, to], |r| r.get(0))?) };
    if span <= SAMPLE_WINDOWS * SAMPLE_WIDTH {
        return Ok(count(first, last)? as u64);
    }
    let stride = (span - SAMPLE_WIDTH) / (SAMPLE_WINDOWS - 1);
    let mut found = 0;
    for i in 0..SAMPLE_WINDOWS {
        let from = first + i * stride;
        found += count(from, from + SAMPLE_WIDTH - 1)?;
    }
    let share = found as f64 / (SAMPLE_WINDOWS * SAMPLE_WIDTH) as f64;
    Ok((span as f64 * share).round() as u64)
}

impl GaugedStore for SqliteStore {
    /// Below [`EXACT_COUNT_BELOW`] records: exact, from one scan of the table (O(rows),
    /// bounded by that threshold). From it on, bounded reads whatever the size:
    /// `in_progress`, `failed` and stuck exactly through the partial index of migration
    /// 0003; `completed` estimated (the rowid span times the share of 16 windows of 1024
    /// rowids in use: exact while the purge keeps rows packed, `approximate` set); expired
    /// exactly up to [`EXPIRED_COUNT_CAP`]; the oldest record among the 1000 next to expire
    /// (exact when every route has the same record TTL); body bytes not summed. Runs on a
    /// read-only connection, so it never delays store operations.
    async fn gauges(&self) -> Result<StoreCount, StoreError> {
        self.read(|c| gauges(c, EXACT_COUNT_BELOW)).await
    }

    /// One scan of the table, whatever its size.
    async fn count_exact(&self) -> Result<StoreCount, StoreError> {
        self.read(|c| gauges(c, i64::MAX)).await
    }

    /// One scan of the table.
    async fn count_sealed(&self) -> Result<Option<Vec<(String, u64)>>, StoreError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(COUNT_SEALED)?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))?;
            Ok(Some(rows.collect::<rusqlite::Result<_>>()?))
        })
        .await
    }

    /// An index range scan over `expires_at`, stopped at `limit`.
    async fn count_expired(&self, limit: NonZeroU32) -> Result<Option<u64>, StoreError> {
        self.read(move |c| {
            let n: i64 = c
                .prepare_cached(COUNT_EXPIRED)?
                .query_row(params![now_millis(), limit.get()], |r| r.get(0))?;
            Ok(Some(n as u64))
        })
        .await
    }

    /// [`DurabilityLevel::Local`]: one file on this host, no replica; `synchronous` says
    /// which crash can lose the last commits. In memory: [`DurabilityLevel::Volatile`].
    async fn durability(&self) -> Result<Durability, StoreError> {
        let sync = self.synchronous;
        let report = match (self.path(), sync) {
            (None, _) => Durability::new(
                DurabilityLevel::Volatile,
                "records live in this process's memory: a restart loses them all, and their keys would run again",
            ),
            (Some(_), Synchronous::Full) => Durability::new(
                DurabilityLevel::Local,
                "commits are on this host's disk when acknowledged (synchronous = FULL); no replica holds them",
            ),
            (Some(_), Synchronous::Normal) => Durability::new(
                DurabilityLevel::Local,
                "commits survive a crash of the process (synchronous = NORMAL), but a power loss or OS crash can lose the last ones; no replica holds them",
            ),
        };
        Ok(report
            .with_fact("journal_mode", "wal")
            .with_fact("synchronous", sync.pragma_value().to_ascii_lowercase()))
    }
}

/// Records per key id of a sealed response (a value that is not text reads as `''`).
const COUNT_SEALED: &str = "SELECT CAST(response_key_id AS TEXT), count(*)
    FROM idempotency_records WHERE response_key_id IS NOT NULL GROUP BY 1 ORDER BY 1";

#[cfg(test)]
mod tests;
