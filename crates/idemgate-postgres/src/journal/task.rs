//! The journal's task: once a second it drops the entries a standby has replayed and those
//! past the window; when a failover is seen it records it in the store, restores the
//! entries and opens the gate when `failover_grace` has passed. And the SQL it runs.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemgate_core::record::{duration_ms, now_millis};
use idemgate_core::report::error_text;
use idemgate_core::{response_checksum, RecordState, StoreError};
use sqlx::{PgPool, Row};
use tokio::task::AbortHandle;
use tokio::time::{Instant, MissedTickBehavior};

use super::file::{Entry, Identity};
use super::Journal;
use crate::error::classify;
use crate::sql::{ms, Table, NOW};

/// How often entries are confirmed and the window applied.
const TICK: Duration = Duration::from_secs(1);

/// How long a failed failover step waits before it is tried again.
const RETRY: Duration = Duration::from_millis(500);

/// The primary's WAL insert position and the lowest replay position of its streaming
/// standbys (NULL without one, or when the role cannot read them), as byte offsets.
/// And the timeline, as the connection checks read it.
const POSITIONS: &str = "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint, \
     (SELECT min(replay_lsn - '0/0'::pg_lsn)::bigint FROM pg_stat_replication \
     WHERE state = 'streaming'), substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)";

/// The SQL of the failover record and of the restore, for one table.
#[derive(Debug)]
pub(crate) struct Statements {
    /// `$1` timeline. Records its first detection (database clock) unless recorded;
    /// returns `(first detection ms, now ms)`; the first is NULL when a concurrent record
    /// is not visible yet (try again).
    failover: String,
    /// `$1..$3` key, `$4` digest, `$5` fp version, `$6` state, `$7` fence, `$8` token,
    /// `$9` lease ms (0: lapsed), `$10` record expiry ms, `$11..$14` status, headers, body,
    /// replayable, `$15` checksum. Returns a row when the entry was written.
    restore: String,
}

impl Statements {
    pub(crate) fn new(table: &Table) -> Self {
        let (t, f, now) = (table.qualified(), table.failovers(), NOW);
        let lease = format!("{now} + $9::bigint * interval '1 millisecond'");
        let in_progress = "$6::text = 'in_progress'";
        let columns = "request_hash, fingerprint_version, state, fence, lease_token, \
             lease_expires_at, created_at, completed_at, expires_at, status, response_headers, \
             response, replayable, response_checksum, response_checksum_fence";
        let excluded = columns
            .split(", ")
            .map(|c| format!("EXCLUDED.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        Self {
            failover: format!(
                "WITH ins AS (INSERT INTO {f} (timeline, first_seen_at) VALUES ($1, {now}) \
                 ON CONFLICT (timeline) DO NOTHING RETURNING first_seen_at) \
                 SELECT {}, {}",
                ms(&format!(
                    "coalesce((SELECT first_seen_at FROM ins), \
                     (SELECT first_seen_at FROM {f} WHERE timeline = $1))"
                )),
                ms(now),
            ),
            // Never over a live completed or failed record, never to a lower fence. Over an
            // in_progress record of the same fence unless it is this very lease, still in
            // progress: another token there is an insert on the new primary after the
            // failover, which the gate kept from being forwarded (it is being released).
            restore: format!(
                "INSERT INTO {t} AS r (user_id, route, key, {columns}) \
                 SELECT $1, $2, $3, $4, $5, $6::text, $7::bigint, \
                 CASE WHEN {in_progress} THEN $8::bigint END, \
                 CASE WHEN {in_progress} THEN {lease} END, {now}, \
                 CASE WHEN NOT {in_progress} THEN {now} END, \
                 greatest(to_timestamp($10::bigint / 1000.0), {lease}), \
                 $11::integer, $12::bytea, $13::bytea, $14::boolean, $15::bytea, \
                 CASE WHEN $15::bytea IS NOT NULL THEN $7::bigint END \
                 ON CONFLICT (user_id, route, key) DO UPDATE SET ({columns}) = ({excluded}) \
                 WHERE r.expires_at <= {now} OR (r.state = 'in_progress' AND \
                 (r.fence < EXCLUDED.fence OR (r.fence = EXCLUDED.fence \
                 AND (r.lease_token IS DISTINCT FROM $8::bigint OR NOT {in_progress})))) \
                 RETURNING true"
            ),
        }
    }
}

/// The store's view of the primary, kept by its connection checks.
pub(crate) trait Primary: Send + Sync + 'static {
    /// The identity the connections were checked on.
    fn identity(&self) -> Identity;
    /// A timeline read on a connection already checked (one a pooler kept open across a
    /// failover): a higher one is a failover, as if a new connection had found it.
    fn timeline_read(&self, timeline: u32);
}

/// What the task works with.
struct Task {
    journal: Arc<Journal>,
    statements: Arc<Mutex<Arc<Statements>>>,
    pool: PgPool,
    /// The store's view of the primary.
    primary: Arc<dyn Primary>,
    /// `(sequence mark, WAL insert position)` read each tick, oldest first.
    pending: VecDeque<(i64, i64)>,
}

/// Starts the journal's task.
pub(crate) fn spawn(
    journal: Arc<Journal>,
    statements: Arc<Mutex<Arc<Statements>>>,
    pool: PgPool,
    primary: Arc<dyn Primary>,
) -> AbortHandle {
    let task = Task {
        journal,
        statements,
        pool,
        primary,
        pending: VecDeque::new(),
    };
    tokio::spawn(task.run()).abort_handle()
}

impl Task {
    async fn run(mut self) {
        let mut handled = 0;
        if self.journal.gate.failovers() == 0 {
            let identity = self.primary.identity();
            if let Err(e) = self
                .journal
                .with_file(move |f| f.set_identity(identity))
                .await
            {
                tracing::error!(error = %error_text(&e), "forward journal: the database's identity was not recorded");
            }
        }
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let seen = self.journal.gate.failovers();
            if seen != handled {
                self.failover(seen).await;
                handled = seen;
            }
            tokio::select! {
                _ = tick.tick() => self.tick().await,
                () = self.journal.gate.wake.notified() => {}
            }
        }
    }

    fn statements(&self) -> Arc<Statements> {
        self.statements
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Handles failover number `seen`, retrying each step until it succeeds.
    async fn failover(&mut self, seen: u64) {
        self.pending.clear();
        loop {
            match self.restore().await {
                Ok(opens_in) => {
                    self.journal.gate.restored(seen, Instant::now() + opens_in);
                    return;
                }
                Err(e) => {
                    tracing::error!(error = %error_text(&e), "forward journal: the failover is not handled yet (new keys stay refused); trying again");
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    }

    /// Records the failover, restores every entry and records the new identity; returns
    /// how long new keys stay refused.
    async fn restore(&self) -> Result<Duration, StoreError> {
        let identity = self.primary.identity();
        let timeline = identity.timeline.ok_or_else(|| {
            StoreError::Unavailable("the primary's timeline is not known yet".into())
        })?;
        let sql = self.statements();
        let row = sqlx::query(&sql.failover)
            .bind(i64::from(timeline))
            .fetch_one(&self.pool)
            .await
            .map_err(classify)?;
        let (first, now): (Option<i64>, i64) = (
            row.try_get(0).map_err(classify)?,
            row.try_get(1).map_err(classify)?,
        );
        let first = first.ok_or_else(|| {
            StoreError::Unavailable("the failover's record is not visible yet".into())
        })?;
        let entries = self.journal.with_file(|file| file.entries()).await?;
        let mut restored = 0u64;
        for entry in &entries {
            if self.restore_entry(&sql, entry).await? {
                restored += 1;
            }
        }
        self.journal
            .with_file(move |file| file.set_identity(identity))
            .await?;
        let grace = duration_ms(self.journal.options.failover_grace);
        let left = u64::try_from(first + grace - now).unwrap_or(0);
        metrics::counter!("idempotency_forward_journal_restored_total").increment(restored);
        tracing::warn!(
            timeline,
            entries = entries.len(),
            restored,
            refused_for_ms = left,
            "forward journal: failover handled, the entries the store lacked are restored; new keys are refused until failover_grace has passed since its first detection"
        );
        Ok(Duration::from_millis(left))
    }

    /// Writes `entry` back where the store lacks it; true when it did.
    async fn restore_entry(&self, sql: &Statements, entry: &Entry) -> Result<bool, StoreError> {
        let held = entry.run == self.journal.run && entry.state == RecordState::InProgress;
        let lease_ms = if held { entry.lease_ttl_ms } else { 0 };
        let response = entry.response.as_ref();
        let checksum = response.map(|r| response_checksum(&entry.key, r).to_vec());
        let query = crate::store::key_query(&sql.restore, &entry.key)
            .bind(&entry.fingerprint.digest[..])
            .bind(i32::from(entry.fingerprint.version))
            .bind(entry.state.as_str())
            .bind(entry.fence)
            .bind(entry.token.0)
            .bind(lease_ms)
            .bind(entry.expires_at_ms)
            .bind(response.map(|r| i32::from(r.status)))
            .bind(response.map(|r| r.encode_headers()))
            .bind(response.map(|r| r.body.to_vec()))
            .bind(response.map(|r| r.replayable))
            .bind(checksum);
        let row = query.fetch_optional(&self.pool).await.map_err(classify)?;
        Ok(row.is_some())
    }

    /// Drops the entries a standby has replayed and those past the window; updates the
    /// gauge. Errors are logged (the next tick tries again).
    async fn tick(&mut self) {
        if let Err(e) = self.confirm().await {
            tracing::debug!(error = %error_text(&e), "forward journal: no confirmation this tick");
        }
        let before = now_millis() - duration_ms(self.journal.options.window);
        match self
            .journal
            .with_file(move |file| Ok((file.drop_older(before)?, file.len()?)))
            .await
        {
            Ok((expired, left)) => {
                if expired > 0 {
                    metrics::counter!("idempotency_forward_journal_expired_total")
                        .increment(expired as u64);
                    tracing::warn!(expired, "forward journal: entries dropped at forward_journal_window without a standby confirming them; a failover now could run their keys again");
                }
                metrics::gauge!("idempotency_forward_journal_entries").set(left as f64);
            }
            Err(e) => {
                tracing::error!(error = %error_text(&e), "forward journal: the file cannot be read")
            }
        }
    }

    /// Reads the positions after a sequence mark and drops the entries confirmed by them.
    async fn confirm(&mut self) -> Result<(), StoreError> {
        if self.journal.gate.closed_for().is_some() {
            return Ok(()); // a failover is being handled
        }
        let mark = self.journal.with_file(|file| Ok(file.next_seq())).await?;
        let row = sqlx::query(POSITIONS)
            .fetch_one(&self.pool)
            .await
            .map_err(classify)?;
        let inserted: i64 = row.try_get(0).map_err(classify)?;
        let replayed: Option<i64> = row.try_get(1).map_err(classify)?;
        let timeline: String = row.try_get(2).map_err(classify)?;
        if let Ok(timeline) = u32::from_str_radix(&timeline, 16) {
            if self
                .primary
                .identity()
                .timeline
                .is_some_and(|seen| timeline > seen)
            {
                self.primary.timeline_read(timeline);
                return Ok(()); // the positions are the new primary's
            }
        }
        self.pending.push_back((mark, inserted));
        let cap = (self.journal.options.window.as_secs() as usize).max(1);
        while self.pending.len() > cap {
            self.pending.pop_front();
        }
        let mut confirmed = None;
        while let Some(&(seq, lsn)) = self.pending.front() {
            match replayed {
                Some(replayed) if lsn <= replayed => {
                    confirmed = Some(seq);
                    self.pending.pop_front();
                }
                _ => break,
            }
        }
        let Some(seq) = confirmed else {
            return Ok(());
        };
        self.journal
            .with_file(move |file| file.drop_confirmed(seq))
            .await?;
        Ok(())
    }
}
