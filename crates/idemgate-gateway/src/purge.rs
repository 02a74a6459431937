//! Purging expired records: one loop for `idemgate purge` (one-shot or `--watch`) and the
//! in-process purge of `idemgate serve` (DESIGN.md, "TTL and cleanup").
//!
//! A run deletes in batches ([`idemgate_core::IdempotencyStore::purge_expired`]) until a batch comes back
//! short, optionally at most `max_rate` rows per second, and records its metrics:
//! `idempotency_purge_runs_total{result}`, `idempotency_purged_records_total`,
//! `idempotency_purge_last_duration_seconds` and
//! `idempotency_purge_last_success_timestamp_seconds`. A dry run counts what would go and
//! deletes nothing.

use std::future::Future;
use std::num::NonZeroU32;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idemgate_core::{GaugedStore, StoreError};
use tokio::time::Instant;

mod command;
mod progress;

pub use command::{command, PurgeArgs};
pub use progress::{for_stderr, wants_bar, BarProgress, LogProgress, Progress, QuietProgress};

/// How a purge run goes.
#[derive(Debug, Clone, Copy)]
pub struct PurgeOptions {
    /// Records deleted per batch (at most `max_rate` when that is smaller).
    pub batch: NonZeroU32,
    /// Most records deleted per second; `None`: as fast as the store goes.
    pub max_rate: Option<NonZeroU32>,
    /// Count what would be deleted; delete nothing.
    pub dry_run: bool,
}

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PurgeReport {
    /// Records deleted (0 on a dry run).
    pub deleted: u64,
    /// Dry run: records past their `expires_at` now. `None` otherwise, or when the store
    /// expires records itself (Redis).
    pub would_delete: Option<u64>,
    /// True when the store expires records itself (Redis): nothing ever waits for a purge.
    pub self_expiring: bool,
    /// Batches run.
    pub batches: u64,
    /// How long the run took.
    pub duration: Duration,
}

impl PurgeReport {
    /// One line for people: `purged N expired records`, or the dry run's count.
    pub fn summary(&self) -> String {
        if self.self_expiring {
            return "nothing to purge: this store deletes each record itself at its expiry".into();
        }
        match self.would_delete {
            Some(n) => format!("dry run: {n} expired records would be purged, none was"),
            None => format!("purged {} expired records", self.deleted),
        }
    }
}

/// Runs one purge: batches until a short one, paced by `max_rate`.
///
/// # Errors
/// The store's error; records already deleted stay deleted (and are counted in the
/// metrics).
pub async fn run_once<S: GaugedStore>(
    store: &S,
    opts: &PurgeOptions,
    progress: &mut dyn Progress,
) -> Result<PurgeReport, StoreError> {
    let started = Instant::now();
    let result = batches(store, opts, progress, started).await;
    let duration = started.elapsed();
    if opts.dry_run {
        return result;
    }
    let outcome = if result.is_ok() { "ok" } else { "error" };
    metrics::counter!("idempotency_purge_runs_total", "result" => outcome).increment(1);
    metrics::gauge!("idempotency_purge_last_duration_seconds").set(duration.as_secs_f64());
    if result.is_ok() {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        metrics::gauge!("idempotency_purge_last_success_timestamp_seconds").set(now.as_secs_f64());
    }
    result.map(|r| PurgeReport { duration, ..r })
}

async fn batches<S: GaugedStore>(
    store: &S,
    opts: &PurgeOptions,
    progress: &mut dyn Progress,
    started: Instant,
) -> Result<PurgeReport, StoreError> {
    let mut report = PurgeReport::default();
    let counted = if opts.dry_run || progress.wants_total() {
        Some(store.count_expired(NonZeroU32::MAX).await?)
    } else {
        None
    };
    report.self_expiring = matches!(counted, Some(None));
    let expected = counted.flatten();
    if opts.dry_run {
        report.would_delete = expected;
        return Ok(report);
    }
    progress.start(expected);
    let size = opts.max_rate.map_or(opts.batch, |r| r.min(opts.batch));
    loop {
        let n = store.purge_expired(size).await?;
        report.deleted += n;
        report.batches += 1;
        metrics::counter!("idempotency_purged_records_total").increment(n);
        progress.advance(report.deleted);
        if n < u64::from(size.get()) {
            progress.finish(report.deleted);
            return Ok(report);
        }
        match opts.max_rate {
            // Keeps the average at or under the rate since the run started.
            Some(rate) => {
                let due = Duration::from_secs_f64(report.deleted as f64 / f64::from(rate.get()));
                tokio::time::sleep_until(started + due).await;
            }
            None => tokio::task::yield_now().await,
        }
    }
}

/// Runs [`run_once`] every `every` until `stop` resolves (first run at once when `now`).
/// Each run's summary is logged when it deleted something; an error is logged once when it
/// first appears (a run failing the same way again logs at debug level), and once more
/// when a run succeeds again.
pub async fn watch<S: GaugedStore>(
    store: &S,
    opts: PurgeOptions,
    every: Duration,
    now: bool,
    mut progress: impl FnMut() -> Box<dyn Progress>,
    stop: impl Future<Output = ()>,
) {
    let mut stop = std::pin::pin!(stop);
    let mut last_error: Option<String> = None;
    let mut first = now;
    loop {
        if !std::mem::take(&mut first) {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = &mut stop => return,
            }
        }
        let mut shown = progress();
        let run = tokio::select! {
            r = run_once(store, &opts, &mut *shown) => r,
            _ = &mut stop => return,
        };
        match run {
            Ok(report) => {
                if last_error.take().is_some() {
                    tracing::info!("purge succeeds again");
                }
                if report.deleted > 0 || report.would_delete.is_some() {
                    tracing::info!(purged = report.deleted, "{}", report.summary());
                }
            }
            Err(e) => {
                let text = error_text(&e);
                if last_error.as_deref() == Some(&text) {
                    tracing::debug!(error = %text, "purge failed again");
                } else {
                    tracing::warn!(error = %text, "purge failed");
                    last_error = Some(text);
                }
            }
        }
    }
}

pub use idemgate_core::report::{error_text, join_chain};

#[cfg(test)]
mod tests;
