//! The journal's SQL for one table: the failover record, the grace lookup and the batched
//! restore; and the restore of a batch of entries.

use idemgate_core::{response_checksum, RecordState, StoreError};
use sqlx::{PgPool, Row};

use super::file::Entry;
use crate::error::classify;
use crate::sql::{ms, Table, NOW};

/// The most entries restored by one statement.
pub(crate) const RESTORE_BATCH: usize = 500;

/// The SQL of the failover record and of the restore, for one table.
#[derive(Debug)]
pub(crate) struct Statements {
    /// `$1` system identifier (0 when unreadable), `$2` timeline. Records the first
    /// detection (database clock) unless recorded; returns `(first detection ms, now ms)`,
    /// the first never after now; NULL when a concurrent record is not visible yet.
    failover: String,
    /// `$1`, `$2` as [`Statements::failover`]: `(first detection ms, now ms)` of a failover
    /// already recorded, or no row.
    recorded: String,
    /// Arrays, one element per entry: `$1..$3` key, `$4` digest, `$5` fp version, `$6`
    /// state, `$7` fence, `$8` token, `$9` lease ms (0: lapsed), `$10` record expiry ms,
    /// `$11..$14` status, headers, body, replayable, `$15` checksum, `$16` key id. One row per entry
    /// written.
    restore: String,
}

impl Statements {
    pub(crate) fn new(table: &Table) -> Self {
        let (t, f, now) = (table.qualified(), table.failovers(), NOW);
        let key = "system_identifier = $1 AND timeline = $2";
        let first = |expr: &str| ms(&format!("least({expr}, {now})"));
        Self {
            failover: format!(
                "WITH ins AS (INSERT INTO {f} (system_identifier, timeline, first_seen_at) \
                 VALUES ($1, $2, {now}) ON CONFLICT (system_identifier, timeline) DO NOTHING \
                 RETURNING first_seen_at) SELECT {}, {}",
                first(&format!(
                    "coalesce((SELECT first_seen_at FROM ins), \
                     (SELECT first_seen_at FROM {f} WHERE {key}))"
                )),
                ms(now),
            ),
            recorded: format!(
                "SELECT {}, {} FROM {f} WHERE {key}",
                first("first_seen_at"),
                ms(now)
            ),
            restore: restore_sql(&t),
        }
    }

    /// Records the failover to `timeline` of database `system_identifier`; its first
    /// detection and now, in ms (database clock).
    ///
    /// # Errors
    /// A store error; [`StoreError::Unavailable`] while a concurrent record is not visible.
    pub(crate) async fn record_failover(
        &self,
        pool: &PgPool,
        system_identifier: Option<u64>,
        timeline: u32,
    ) -> Result<(i64, i64), StoreError> {
        let row = sqlx::query(&self.failover)
            .bind(system_identifier.unwrap_or(0) as i64)
            .bind(i64::from(timeline))
            .fetch_one(pool)
            .await
            .map_err(classify)?;
        let first: Option<i64> = row.try_get(0).map_err(classify)?;
        let first = first.ok_or_else(|| {
            StoreError::Unavailable("the failover's record is not visible yet".into())
        })?;
        Ok((first, row.try_get(1).map_err(classify)?))
    }

    /// The first detection and now (ms) of the failover to `timeline`, if one is recorded
    /// (none either when the failovers table does not exist yet).
    ///
    /// # Errors
    /// A store error.
    pub(crate) async fn recorded_failover(
        &self,
        pool: &PgPool,
        system_identifier: Option<u64>,
        timeline: u32,
    ) -> Result<Option<(i64, i64)>, StoreError> {
        let query = sqlx::query(&self.recorded)
            .bind(system_identifier.unwrap_or(0) as i64)
            .bind(i64::from(timeline));
        let row = match query.fetch_optional(pool).await {
            Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("42P01") => None,
            row => row.map_err(classify)?,
        };
        row.map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
            .transpose()
            .map_err(classify)
    }

    /// Writes `entries` back where the store lacks them, in one statement; `run` is this
    /// process's run (its `in_progress` entries get a live lease). Returns how many it wrote.
    ///
    /// # Errors
    /// A store error (nothing of the batch is written then).
    pub(crate) async fn restore(
        &self,
        pool: &PgPool,
        entries: &[Entry],
        run: i64,
    ) -> Result<u64, StoreError> {
        let col = |f: &dyn Fn(&Entry) -> Option<Vec<u8>>| entries.iter().map(f).collect::<Vec<_>>();
        let held = |e: &Entry| e.run == run && e.state == RecordState::InProgress;
        let response = |e: &Entry| e.response.clone();
        let query = sqlx::query(&self.restore)
            .bind(
                entries
                    .iter()
                    .map(|e| e.key.principal.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(
                entries
                    .iter()
                    .map(|e| e.key.route.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(
                entries
                    .iter()
                    .map(|e| e.key.key.as_str().to_owned())
                    .collect::<Vec<_>>(),
            )
            .bind(col(&|e| Some(e.fingerprint.digest.to_vec())))
            .bind(
                entries
                    .iter()
                    .map(|e| i32::from(e.fingerprint.version))
                    .collect::<Vec<_>>(),
            )
            .bind(entries.iter().map(|e| e.state.as_str()).collect::<Vec<_>>())
            .bind(entries.iter().map(|e| e.fence).collect::<Vec<_>>())
            .bind(entries.iter().map(|e| e.token.0).collect::<Vec<_>>())
            .bind(
                entries
                    .iter()
                    .map(|e| if held(e) { e.lease_ttl_ms } else { 0 })
                    .collect::<Vec<_>>(),
            )
            .bind(entries.iter().map(|e| e.expires_at_ms).collect::<Vec<_>>())
            .bind(
                entries
                    .iter()
                    .map(|e| response(e).map(|r| i32::from(r.status)))
                    .collect::<Vec<_>>(),
            )
            .bind(col(&|e| response(e).map(|r| r.encode_headers())))
            .bind(col(&|e| response(e).map(|r| r.body.to_vec())))
            .bind(
                entries
                    .iter()
                    .map(|e| response(e).map(|r| r.replayable))
                    .collect::<Vec<_>>(),
            )
            .bind(col(&|e| {
                e.response
                    .as_ref()
                    .map(|r| response_checksum(&e.key, r).to_vec())
            }))
            .bind(
                entries
                    .iter()
                    .map(|e| response(e).and_then(|r| r.sealed_by.map(|id| id.to_string())))
                    .collect::<Vec<_>>(),
            );
        let done = query.execute(pool).await.map_err(classify)?;
        Ok(done.rows_affected())
    }
}

/// The batched restore. Never to a lower fence. Over an `in_progress` record of a lower
/// fence; of the same fence unless it is the entry's own lease still in progress (another
/// token there is an insert on the new primary after the failover, which the gate kept from
/// being forwarded: it is being released). An entry with an outcome also over a completed or
/// failed record of a lower fence: the entry is a take-over whose outcome the failover lost,
/// and the lower fence's outcome landed after the failover (a completion ends a fence's
/// take-overs, so the standby cannot have held it before); the take-over's was answered
/// first. An `in_progress` entry never replaces an outcome.
fn restore_sql(t: &str) -> String {
    let now = NOW;
    let lease = format!("{now} + u.lease_ms * interval '1 millisecond'");
    let in_progress = "u.state = 'in_progress'";
    let columns = "request_hash, fingerprint_version, state, fence, lease_token, \
         lease_expires_at, created_at, completed_at, expires_at, status, response_headers, \
         response, replayable, response_checksum, response_checksum_fence, response_key_id";
    let excluded = columns
        .split(", ")
        .map(|c| format!("EXCLUDED.{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "INSERT INTO {t} AS r (user_id, route, key, {columns}) \
         SELECT u.principal, u.route, u.key, u.digest, u.version, u.state, u.fence, \
         CASE WHEN {in_progress} THEN u.token END, \
         CASE WHEN {in_progress} THEN {lease} END, {now}, \
         CASE WHEN NOT {in_progress} THEN {now} END, \
         greatest(to_timestamp(u.expires_ms / 1000.0), {lease}), \
         u.status, u.headers, u.body, u.replayable, u.checksum, \
         CASE WHEN u.checksum IS NOT NULL THEN u.fence END, u.key_id \
         FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::integer[], \
         $6::text[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::integer[], \
         $12::bytea[], $13::bytea[], $14::boolean[], $15::bytea[], $16::text[]) \
         AS u(principal, route, key, digest, version, state, fence, token, lease_ms, \
         expires_ms, status, headers, body, replayable, checksum, key_id) \
         ON CONFLICT (user_id, route, key) DO UPDATE SET ({columns}) = ({excluded}) \
         WHERE r.expires_at <= {now} OR (r.state = 'in_progress' AND \
         (r.fence < EXCLUDED.fence OR (r.fence = EXCLUDED.fence \
         AND (r.lease_token IS DISTINCT FROM EXCLUDED.lease_token \
         OR EXCLUDED.state <> 'in_progress')))) \
         OR (r.state <> 'in_progress' AND EXCLUDED.state <> 'in_progress' \
         AND r.fence < EXCLUDED.fence)"
    )
}
