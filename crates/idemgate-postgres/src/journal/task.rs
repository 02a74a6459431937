//! The journal's task: once a second it drops the entries a standby has replayed and those
//! past the window; when a failover is seen it records it in the store, restores the
//! entries and opens the gate when `failover_grace` has passed. And the SQL it runs.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemgate_core::record::{duration_ms, now_millis};
use idemgate_core::report::error_text;
use idemgate_core::StoreError;
use sqlx::{PgPool, Row};
use tokio::task::AbortHandle;
use tokio::time::{Instant, MissedTickBehavior};

use super::file::Identity;
use super::sql::{Statements, RESTORE_BATCH};
use super::Journal;
use crate::error::classify;

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

    /// Records the failover, restores every entry (in batches of [`RESTORE_BATCH`]) and
    /// records the new identity; returns how long new keys stay refused.
    async fn restore(&self) -> Result<Duration, StoreError> {
        let identity = self.primary.identity();
        let timeline = identity.timeline.ok_or_else(|| {
            StoreError::Unavailable("the primary's timeline is not known yet".into())
        })?;
        let sql = self.statements();
        let id = identity.system_identifier;
        let (first, now) = sql.record_failover(&self.pool, id, timeline).await?;
        self.journal.gate.first_seen(first);
        let started = Instant::now();
        let entries = self.journal.with_file(|file| file.entries()).await?;
        let mut restored = 0u64;
        for batch in entries.chunks(RESTORE_BATCH) {
            restored += sql.restore(&self.pool, batch, self.journal.run).await?;
        }
        self.journal
            .with_file(move |file| file.set_identity(identity))
            .await?;
        let took = started.elapsed();
        // The grace left once the restore ended: `now` was read before it.
        let left = grace_left(first, now, self.journal.options.failover_grace).saturating_sub(took);
        metrics::counter!("idempotency_forward_journal_restored_total").increment(restored);
        tracing::warn!(
            timeline,
            entries = entries.len(),
            restored,
            took_ms = took.as_millis() as u64,
            refused_for_ms = left.as_millis() as u64,
            "forward journal: failover handled, the entries the store lacked are restored; new keys are refused until failover_grace has passed since its first detection"
        );
        if left.is_zero() && !entries.is_empty() {
            tracing::error!(took_ms = took.as_millis() as u64, "forward journal: the restore ended after failover_grace had passed: other processes took new keys before it, and retries of these keys there may have run again; raise failover_grace");
        }
        Ok(left)
    }

    /// Drops the entries a standby has replayed and those past the window; updates the
    /// gauge. Errors are logged (the next tick tries again).
    async fn tick(&mut self) {
        self.journal.check_file();
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

/// How long new keys stay refused after a failover first detected at `first` (ms, database
/// clock, `now` its now): the rest of `grace`, never more than `grace`.
pub(crate) fn grace_left(first: i64, now: i64, grace: Duration) -> Duration {
    let grace = duration_ms(grace);
    let elapsed = now.saturating_sub(first).max(0);
    Duration::from_millis(u64::try_from(grace.saturating_sub(elapsed)).unwrap_or(0))
}
