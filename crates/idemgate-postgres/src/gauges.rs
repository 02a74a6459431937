//! [`GaugedStore`] for [`PostgresStore`], the one count of `idemgate stats` and the gauges
//! (and the durability report of `durability.rs`):
//! indexed queries and catalog statistics, cheap enough for every metrics interval on a
//! table of any size (marked approximate past [`EXACT_COUNT_BELOW`] rows).

use std::num::NonZeroU32;

use idemgate_core::durability::Durability;
use idemgate_core::gauges::{GaugedStore, StoreCount};
use idemgate_core::{RecordState, StoreError};
use sqlx::{Executor, Row};

use crate::error::{classify, Result};
use crate::sql::{ms, NOW};
use crate::store::PostgresStore;

/// Below this many live rows (the statistics' estimate) records are counted by state
/// exactly; above, the count comes from the statistics.
pub const EXACT_COUNT_BELOW: i64 = 100_000;

/// The expired count stops here, so a huge backlog costs a bounded index scan.
pub const EXPIRED_COUNT_CAP: i64 = 1_000_000;

/// One round trip: catalog numbers, the state statistics, the in-progress partial index
/// (migration 0003), the oldest record near the head of the `expires_at` index, the capped
/// expired count and the clock.
fn catalog_sql(t: &str) -> String {
    let now = NOW;
    let stats = "FROM pg_stats s WHERE s.schemaname = n.nspname AND s.tablename = c.relname \
                 AND s.attname = 'state'";
    format!(
        "SELECT pg_total_relation_size(c.oid)::bigint, \
         pg_stat_get_live_tuples(c.oid)::bigint, pg_stat_get_dead_tuples(c.oid)::bigint, \
         (SELECT s.most_common_vals::text::text[] {stats}), \
         (SELECT s.most_common_freqs {stats}), \
         (SELECT count(*) FROM {t} WHERE state = 'in_progress'), \
         (SELECT count(*) FROM {t} WHERE state = 'in_progress' AND expires_at > {now} \
           AND (lease_expires_at IS NULL OR lease_expires_at <= {now})), \
         (SELECT {created} FROM (SELECT created_at FROM {t} ORDER BY expires_at LIMIT 1000) o), \
         (SELECT count(*) FROM (SELECT 1 FROM {t} WHERE expires_at <= {now} LIMIT $2) e), \
         {now_ms} \
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE c.oid = $1::regclass",
        created = ms("min(created_at)"),
        now_ms = ms(now),
    )
}

/// Records `completed` and `failed` (of `settled` = live minus in progress) split by the
/// `state` column's most-common-value frequencies; all `completed` until the first ANALYZE.
fn split(settled: u64, vals: Option<Vec<String>>, freqs: Option<Vec<f32>>) -> (u64, u64) {
    let (mut fc, mut ff) = (0.0_f64, 0.0_f64);
    for (v, f) in vals
        .unwrap_or_default()
        .iter()
        .zip(freqs.unwrap_or_default())
    {
        match v.as_str() {
            "completed" => fc = f64::from(f),
            "failed" => ff = f64::from(f),
            _ => {}
        }
    }
    if fc + ff <= 0.0 {
        return (settled, 0);
    }
    let failed = (settled as f64 * ff / (fc + ff)).round() as u64;
    (settled - failed.min(settled), failed.min(settled))
}

impl PostgresStore {
    /// Counts by state, body bytes and the oldest record, from one scan of the table.
    async fn exact_counts(&self, g: &mut StoreCount) -> Result<()> {
        let sql = format!(
            "SELECT state, count(*), {}, coalesce(sum(length(response)), 0)::bigint \
             FROM {} GROUP BY state",
            ms("min(created_at)"),
            self.table.qualified()
        );
        let rows = self.pool.fetch_all(sqlx::query(&sql)).await?;
        (g.in_progress, g.completed, g.failed) = (0, 0, 0);
        (g.oldest_created_at, g.body_bytes) = (None, Some(0));
        for r in rows {
            let state: Option<String> = r.try_get(0)?;
            let n = r.try_get::<i64, _>(1)?.max(0) as u64;
            match state.as_deref().and_then(RecordState::parse) {
                Some(RecordState::InProgress) => g.in_progress = n,
                Some(RecordState::Completed) => g.completed = n,
                Some(RecordState::Failed) => g.failed = n,
                None => g.unknown_state += n,
            }
            if let Some(c) = r.try_get::<Option<i64>, _>(2)? {
                g.oldest_created_at = Some(g.oldest_created_at.map_or(c, |o| o.min(c)));
            }
            let bytes = r.try_get::<i64, _>(3)?.max(0) as u64;
            g.body_bytes = g.body_bytes.map(|b| b + bytes);
        }
        Ok(())
    }

    /// The count of [`GaugedStore::gauges`]; exact below `exact_below` live rows.
    async fn count(&self, exact_below: i64) -> Result<StoreCount> {
        let sql = catalog_sql(&self.table.qualified());
        let q = sqlx::query(&sql)
            .bind(self.table.qualified())
            .bind(EXPIRED_COUNT_CAP);
        let r = self.pool.fetch_one(q).await?;
        let get = |i: usize| -> Result<i64> { Ok(r.try_get::<Option<i64>, _>(i)?.unwrap_or(0)) };
        let live = get(1)?;
        let in_progress = get(5)?.max(0) as u64;
        let settled = (live.max(0) as u64).saturating_sub(in_progress);
        let vals = r.try_get::<Option<Vec<String>>, _>(3)?;
        let freqs = r.try_get::<Option<Vec<f32>>, _>(4)?;
        let (completed, failed) = split(settled, vals, freqs);
        let approximate = live >= exact_below;
        let mut g = StoreCount {
            now: get(9)?,
            in_progress,
            completed,
            failed,
            table_bytes: Some(get(0)?.max(0) as u64),
            dead_rows: Some(get(2)?.max(0) as u64),
            oldest_created_at: r.try_get::<Option<i64>, _>(7)?,
            expired: Some(get(8)?.max(0) as u64),
            stuck_in_progress: get(6)?.max(0) as u64,
            approximate,
            ..StoreCount::default()
        };
        if !g.approximate {
            self.exact_counts(&mut g).await?;
        }
        Ok(g)
    }
}

impl GaugedStore for PostgresStore {
    /// Table bytes (`pg_total_relation_size`: heap, indexes, TOAST) and dead rows
    /// (`pg_stat_get_dead_tuples`) from the catalog; `in_progress` and stuck records exactly,
    /// through the partial index of migration 0003; expired records exactly up to
    /// [`EXPIRED_COUNT_CAP`] through the `expires_at` index. `completed`/`failed` are exact
    /// below [`EXACT_COUNT_BELOW`] live rows, else estimated from the statistics
    /// (`approximate` is then set; the oldest record is then the oldest `created_at` among
    /// the 1000 records next to expire, exact when every route has the same record TTL, and
    /// body bytes are not summed). Below [`EXACT_COUNT_BELOW`] one scan of the table counts
    /// every state (corrupt ones as unknown), the body bytes and the oldest record exactly.
    async fn gauges(&self) -> Result<StoreCount, StoreError> {
        Ok(self.count(EXACT_COUNT_BELOW).await?)
    }

    /// As [`GaugedStore::gauges`] with one scan of the table whatever its size.
    async fn count_exact(&self) -> Result<StoreCount, StoreError> {
        Ok(self.count(i64::MAX).await?)
    }

    /// [`idemgate_core::DurabilityLevel::Volatile`] when `fsync` or `synchronous_commit` is off;
    /// [`idemgate_core::DurabilityLevel::Replicated`] when commits wait (`synchronous_commit` on,
    /// `remote_write` or `remote_apply`) for the standbys `synchronous_standby_names`
    /// requires and that many stream as `sync` or `quorum`; otherwise
    /// [`idemgate_core::DurabilityLevel::Local`]. The facts: those settings, the required count, whether the
    /// server is in recovery, the timeline, the system identifier and each standby's state
    /// and LSNs (`not readable` without `pg_monitor`). With
    /// [`crate::PostgresOptions::with_require_synchronous_replication`],
    /// `refusing_new_keys` says why new keys are refused, and the store takes that answer.
    /// Two statements (one when `pg_control_system()` may not be called).
    async fn durability(&self) -> Result<Durability, StoreError> {
        Ok(self.durability_report().await?)
    }

    /// One scan of the table.
    async fn count_sealed(&self) -> Result<Option<Vec<(String, u64)>>, StoreError> {
        let sql = format!(
            "SELECT response_key_id, count(*) FROM {} WHERE response_key_id IS NOT NULL \
             GROUP BY 1 ORDER BY 1",
            self.table.qualified()
        );
        let rows: Vec<(String, i64)> = sqlx::query_as(&sql)
            .fetch_all(&self.pool)
            .await
            .map_err(classify)?;
        Ok(Some(
            rows.into_iter()
                .map(|(id, n)| (id, n.max(0) as u64))
                .collect(),
        ))
    }

    /// An index range scan over `expires_at`, stopped at `limit`.
    async fn count_expired(&self, limit: NonZeroU32) -> Result<Option<u64>, StoreError> {
        let t = self.table.qualified();
        let sql = format!(
            "SELECT count(*) FROM (SELECT 1 FROM {t} WHERE expires_at <= {NOW} LIMIT $1) e"
        );
        let q = sqlx::query_scalar(&sql).bind(i64::from(limit.get()));
        let n: i64 = q.fetch_one(&self.pool).await.map_err(classify)?;
        Ok(Some(n.max(0) as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn settled_rows_split_by_the_state_statistics() {
        let vals = Some(vec!["completed".to_owned(), "failed".to_owned()]);
        assert_eq!(split(100, vals, Some(vec![0.6, 0.2])), (75, 25));
        assert_eq!(split(100, None, None), (100, 0));
        assert_eq!(
            split(0, Some(vec!["failed".into()]), Some(vec![1.0])),
            (0, 0)
        );
    }
}
