//! The process's logs, on stderr, as text or JSON lines; levels and targets from `RUST_LOG`.
//!
//! The access log (target [`ACCESS_TARGET`], one `info` line per covered request) is written
//! by a thread of its own from a buffer of at most [`ACCESS_BUFFER_BYTES`] (`batch.rs`), in
//! one write per [`ACCESS_GATHER`] while lines keep coming: a request never waits for
//! stderr. When the buffer is full (stderr slower than the requests, e.g. a blocked pipe),
//! access lines are dropped and counted in `idempotency_access_log_dropped_total`. Every
//! other line (start-up, warnings, errors, operator audit lines) is written by the thread
//! that logs it and is never dropped. The buffer is written out when the [`Logging`] guard
//! is dropped, at exit.

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
    let (access, guard) = access_writer(std::io::stderr(), ACCESS_BUFFER_BYTES);
    let _ = ACCESS.set(access.clone());
    tracing_subscriber::registry()
        .with(filter)
        .with(layers(format, ansi, access, std::io::stderr))
        .init();
    Logging { _access: guard }
}

/// A buffer of at most `limit` bytes in front of `sink`, written by a thread of its own.
fn access_writer<W>(sink: W, limit: usize) -> (Batch, BatchGuard)
where
    W: std::io::Write + Send + 'static,
{
    Batch::new(sink, limit, ACCESS_GATHER, "idemgate-access-log")
}

/// The access log's layer on `access` and every other line's on `rest`.
fn layers<S, R>(format: LogFormat, ansi: bool, access: Batch, rest: R) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    R: for<'w> fmt::MakeWriter<'w> + Send + Sync + 'static,
{
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
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// A sink that takes nothing until `open` is set: stderr behind a stuck pipe.
    struct Stuck(Arc<Mutex<bool>>);

    impl Write for Stuck {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            while !*self.0.lock().unwrap() {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_stuck_sink_drops_and_counts_access_lines_and_never_other_lines() {
        let open = Arc::new(Mutex::new(false));
        // Room for 8 lines of about 100 bytes.
        let (access, guard) = access_writer(Stuck(open.clone()), 800);
        let dropped = access.clone();
        let rest = Lines::default();
        let sink = rest.clone();
        let layers = layers(LogFormat::Json, false, access, move || sink.clone());
        let subscriber = tracing_subscriber::registry().with(layers);
        tracing::subscriber::with_default(subscriber, || {
            for i in 0..100 {
                tracing::info!(target: ACCESS_TARGET, i, "request");
            }
            for i in 0..20 {
                tracing::warn!(i, "a warning");
            }
        });
        // The writer thread holds at most one batch, the buffer 8 lines: the rest were
        // dropped.
        assert!(dropped.dropped() >= 100 - 2 * 8, "{}", dropped.dropped());
        let written = String::from_utf8(rest.0.lock().unwrap().clone()).unwrap();
        assert_eq!(written.lines().count(), 20, "{written}");
        assert!(
            written.lines().all(|l| l.contains("a warning")),
            "{written}"
        );
        *open.lock().unwrap() = true;
        drop(guard);
    }

    #[test]
    fn every_access_line_is_written_whole_and_in_order_by_the_guard_at_exit() {
        let sink = Lines::default();
        let (access, guard) = access_writer(sink.clone(), 1 << 20);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let access = access.clone();
                std::thread::spawn(move || {
                    for i in 0..500 {
                        let line = format!("thread {t} line {i:04} {}\n", "x".repeat(t * 7));
                        access.make_writer().write_all(line.as_bytes()).unwrap();
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        drop(guard);
        assert_eq!(access.dropped(), 0);
        let written = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
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
        let sink = Lines::default();
        let (access, _guard) = access_writer(sink.clone(), 1 << 20);
        access.make_writer().write_all(b"one line\n").unwrap();
        // Not a timing assertion: the line must arrive at some point before the guard drops.
        for _ in 0..2000 {
            if !sink.0.lock().unwrap().is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(&sink.0.lock().unwrap()[..], b"one line\n");
    }
}
