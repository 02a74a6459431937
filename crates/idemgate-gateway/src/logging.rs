//! The process's logs, on stderr, as text or JSON lines; levels and targets from `RUST_LOG`.
//!
//! Every line is written by a thread of its own from one buffer (`batch.rs`), so no request
//! waits for stderr. The access log (target [`ACCESS_TARGET`], one `info` line per covered
//! request) fills at most [`ACCESS_BUFFER_BYTES`] of it and is written in one write per
//! [`ACCESS_GATHER`] while lines keep coming; when the buffer is full (stderr slower than the
//! requests, e.g. a blocked pipe), access lines are dropped and counted in
//! `idempotency_access_log_dropped_total`. Every other line (start-up, warnings, errors,
//! operator audit lines) is written at once and never dropped: it may use
//! [`OTHER_RESERVE_BYTES`] more, and only past that does the thread that logs it wait for
//! stderr. The buffer is written out when the [`Logging`] guard is dropped, at exit.

mod batch;

use std::io::IsTerminal;
use std::sync::OnceLock;
use std::time::Duration;

use batch::{Batch, BatchGuard};
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, EnvFilter, Layer};

use crate::cli::LogFormat;
use crate::telemetry::ACCESS_LOG_DROPPED;

/// The tracing target of the access log.
pub const ACCESS_TARGET: &str = idemgate_tower::ACCESS_LOG_TARGET;

/// Bytes of access lines waiting for the writer thread before new ones are dropped: 4 MiB,
/// about 15,000 lines (the writer holds one more batch while it writes it).
pub const ACCESS_BUFFER_BYTES: usize = 4 << 20;

/// Bytes beyond [`ACCESS_BUFFER_BYTES`] that other lines (warnings, errors, audit lines) may
/// fill while stderr is blocked before the thread that logs one waits: 4 MiB.
pub const OTHER_RESERVE_BYTES: usize = 4 << 20;

/// How long the writer thread gathers access lines after the first one before it writes
/// them: 10 ms, the most an access line waits while stderr keeps up.
pub const ACCESS_GATHER: Duration = Duration::from_millis(10);

/// The access log's writer, once logging is set up (for its dropped lines).
static ACCESS: OnceLock<Batch> = OnceLock::new();

/// Keeps the access log's writer thread: dropping it writes out the buffer.
#[derive(Debug)]
#[must_use = "dropping it stops the access log's writer"]
pub struct Logging {
    _access: BatchGuard,
}

/// Sets up the process's logs in `format`, at `default_level` unless `RUST_LOG` says
/// otherwise. Call once, before anything logs.
pub fn init(format: LogFormat, default_level: &str) -> Logging {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| default_level.into());
    let ansi = matches!(format, LogFormat::Text) && std::io::stderr().is_terminal();
    let (writer, guard) = log_writer(std::io::stderr(), ACCESS_BUFFER_BYTES);
    let _ = ACCESS.set(writer.clone());
    tracing_subscriber::registry()
        .with(filter)
        .with(layers(format, ansi, &writer))
        .init();
    Logging { _access: guard }
}

/// A buffer in front of `sink`, `limit` bytes for access lines and
/// [`OTHER_RESERVE_BYTES`] more for the others, written by a thread of its own.
fn log_writer<W>(sink: W, limit: usize) -> (Batch, BatchGuard)
where
    W: std::io::Write + Send + 'static,
{
    let sizes = (limit, OTHER_RESERVE_BYTES);
    Batch::new(sink, sizes, ACCESS_GATHER, "idemgate-log-writer")
}

/// The access log's layer and every other line's, both on `writer`.
fn layers<S>(format: LogFormat, ansi: bool, writer: &Batch) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let (access, rest) = (writer.access(), writer.other());
    let is_access = filter_fn(|m| m.target() == ACCESS_TARGET);
    let other = filter_fn(|m| m.target() != ACCESS_TARGET);
    let (access, rest) = (
        fmt::layer().with_ansi(ansi).with_writer(access),
        fmt::layer().with_ansi(ansi).with_writer(rest),
    );
    match format {
        LogFormat::Json => access
            .json()
            .with_filter(is_access)
            .and_then(rest.json().with_filter(other))
            .boxed(),
        LogFormat::Text => access
            .with_filter(is_access)
            .and_then(rest.with_filter(other))
            .boxed(),
    }
}

/// Sets `idempotency_access_log_dropped_total` to the access lines dropped so far (called
/// before `/metrics` is rendered).
pub fn export_dropped() {
    if let Some(access) = ACCESS.get() {
        metrics::counter!(ACCESS_LOG_DROPPED.name).absolute(access.dropped());
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::layer::SubscriberExt;

    use super::batch::tests::Gate;
    use super::*;

    #[test]
    fn a_stuck_stderr_drops_and_counts_access_lines_and_blocks_no_logging_thread() {
        let gate = Gate::default();
        // Room for about 5 access lines of JSON.
        let (writer, guard) = log_writer(gate.clone(), 800);
        let subscriber =
            tracing_subscriber::registry().with(layers(LogFormat::Json, false, &writer));
        // Had a line been written by the thread that logs it, this would never return.
        tracing::subscriber::with_default(subscriber, || {
            for i in 0..100 {
                tracing::info!(target: ACCESS_TARGET, i, "request");
            }
            for i in 0..20 {
                tracing::warn!(i, "a warning");
            }
        });
        // The writer thread holds at most one batch, the buffer 5 lines: the rest were
        // dropped.
        assert!(writer.dropped() >= 100 - 2 * 8, "{}", writer.dropped());
        gate.let_through();
        drop(guard);
        let written = gate.text();
        let warnings = written.lines().filter(|l| l.contains("a warning")).count();
        assert_eq!(warnings, 20, "{written}");
        let access = written.lines().filter(|l| l.contains("request")).count();
        assert_eq!(access as u64 + writer.dropped(), 100, "{written}");
    }

    #[test]
    fn every_line_is_written_whole_and_in_order_by_the_guard_at_exit() {
        let gate = Gate::opened();
        let (writer, guard) = log_writer(gate.clone(), 1 << 20);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let lines = if t % 2 == 0 {
                    writer.access()
                } else {
                    writer.other()
                };
                std::thread::spawn(move || {
                    for i in 0..500 {
                        let line = format!("thread {t} line {i:04} {}\n", "x".repeat(t * 7));
                        lines.make_writer().write_all(line.as_bytes()).unwrap();
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        drop(guard);
        assert_eq!(writer.dropped(), 0);
        let written = gate.text();
        assert_eq!(written.lines().count(), 2000);
        for t in 0..4 {
            let mine: Vec<&str> = written
                .lines()
                .filter(|l| l.starts_with(&format!("thread {t} ")))
                .collect();
            let expected: Vec<String> = (0..500)
                .map(|i| format!("thread {t} line {i:04} {}", "x".repeat(t * 7)))
                .collect();
            assert_eq!(mine, expected);
        }
    }

    #[test]
    fn the_writer_writes_while_the_process_runs() {
        let gate = Gate::opened();
        let (writer, _guard) = log_writer(gate.clone(), 1 << 20);
        writer
            .access()
            .make_writer()
            .write_all(b"one line\n")
            .unwrap();
        writer
            .other()
            .make_writer()
            .write_all(b"a warning\n")
            .unwrap();
        // Not a timing assertion: the lines must arrive at some point before the guard drops.
        for _ in 0..2000 {
            if gate.text().lines().count() == 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(gate.text(), "one line\na warning\n");
    }
}
