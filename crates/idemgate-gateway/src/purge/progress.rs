//! How a purge shows its progress: a bar on a terminal, log lines otherwise, nothing in
//! `serve` (which logs each run's summary).

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Receives a purge run's progress; each method does nothing by default.
pub trait Progress: Send {
    /// True when the run should count the expired records first, for a total.
    fn wants_total(&self) -> bool {
        false
    }
    /// The run starts; `total` records are expected to go, when counted.
    fn start(&mut self, _total: Option<u64>) {}
    /// A batch is done; `deleted` records so far.
    fn advance(&mut self, _deleted: u64) {}
    /// The run is done; `deleted` records in all.
    fn finish(&mut self, _deleted: u64) {}
}

/// True when a progress bar should be drawn: standard error is a terminal and `TERM` is not
/// `dumb`. Otherwise (a pipe, a file, a log collector) progress goes out as log lines.
pub fn wants_bar(stderr_is_terminal: bool, term: Option<&str>) -> bool {
    stderr_is_terminal && term != Some("dumb")
}

/// Picks [`BarProgress`] or [`LogProgress`] for this process's standard error.
pub fn for_stderr() -> Box<dyn Progress> {
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let term = std::env::var("TERM").ok();
    if wants_bar(tty, term.as_deref()) {
        Box::new(BarProgress::default())
    } else {
        Box::new(LogProgress)
    }
}

/// An `indicatif` bar on standard error (a spinner when the total is unknown).
#[derive(Debug, Default)]
pub struct BarProgress {
    bar: Option<ProgressBar>,
}

impl Progress for BarProgress {
    fn wants_total(&self) -> bool {
        true
    }
    fn start(&mut self, total: Option<u64>) {
        let (template, fallback) = match total {
            Some(_) => (
                "purging {bar:40} {pos}/{len} records ({per_sec}, eta {eta})",
                ProgressStyle::default_bar(),
            ),
            None => (
                "purging {spinner} {pos} records ({per_sec})",
                ProgressStyle::default_spinner(),
            ),
        };
        let style = ProgressStyle::with_template(template).unwrap_or(fallback);
        let bar =
            ProgressBar::with_draw_target(total, ProgressDrawTarget::stderr()).with_style(style);
        bar.enable_steady_tick(Duration::from_millis(200));
        self.bar = Some(bar);
    }
    fn advance(&mut self, deleted: u64) {
        if let Some(bar) = &self.bar {
            // Inserts during the run can add expired records past the counted total.
            if bar.length().is_some_and(|len| deleted > len) {
                bar.set_length(deleted);
            }
            bar.set_position(deleted);
        }
    }
    fn finish(&mut self, deleted: u64) {
        if let Some(bar) = self.bar.take() {
            bar.set_position(deleted);
            bar.finish();
        }
    }
}

/// One log line per batch (`tracing` at info level, on standard error).
#[derive(Debug, Default, Clone, Copy)]
pub struct LogProgress;

impl Progress for LogProgress {
    fn start(&mut self, _total: Option<u64>) {
        tracing::info!("purge started");
    }
    fn advance(&mut self, deleted: u64) {
        tracing::info!(deleted, "purge batch done");
    }
    fn finish(&mut self, deleted: u64) {
        tracing::info!(deleted, "purge finished");
    }
}

/// Nothing: `serve` logs each run's summary instead.
#[derive(Debug, Default, Clone, Copy)]
pub struct QuietProgress;

impl Progress for QuietProgress {}
