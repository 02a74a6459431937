//! The process's logs, on stderr, as text or JSON lines; levels and targets from `RUST_LOG`.
//!
//! The access log (target [`ACCESS_TARGET`], one `info` line per covered request) is written
//! by a thread of its own through a bounded queue of [`ACCESS_QUEUE_LINES`] lines
//! (tracing-appender's non-blocking writer): a request never waits for stderr. When the
//! queue is full (stderr slower than the requests, e.g. a blocked pipe), access lines are
//! dropped and counted in `idempotency_access_log_dropped_total`. Every other line (start-up,
//! warnings, errors, operator audit lines) is written by the thread that logs it and is
//! never dropped. The queue is written out when the [`Logging`] guard is dropped, at exit.

use std::io::{IsTerminal, Write};
use std::sync::OnceLock;

use tracing_appender::non_blocking::{ErrorCounter, NonBlocking, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, EnvFilter, Layer};

use crate::cli::LogFormat;
use crate::telemetry::ACCESS_LOG_DROPPED;

/// The tracing target of the access log.
pub const ACCESS_TARGET: &str = idemgate_tower::ACCESS_LOG_TARGET;

/// Access lines the queue holds before it drops them.
pub const ACCESS_QUEUE_LINES: usize = 65_536;

/// Bytes of access lines the writer thread gathers into one write to stderr.
const ACCESS_WRITE_BYTES: usize = 64 << 10;

/// Access lines dropped so far, once logging is set up.
static DROPPED: OnceLock<ErrorCounter> = OnceLock::new();

/// Keeps the access log's writer thread: dropping it writes out the queue.
#[derive(Debug)]
#[must_use = "dropping it stops the access log's writer"]
pub struct Logging {
    _access: WorkerGuard,
}

/// Sets up the process's logs in `format`, at `default_level` unless `RUST_LOG` says
/// otherwise. Call once, before anything logs.
pub fn init(format: LogFormat, default_level: &str) -> Logging {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| default_level.into());
    let ansi = matches!(format, LogFormat::Text) && std::io::stderr().is_terminal();
    // Buffered: the writer thread writes what queued up meanwhile in one call and flushes
    // whenever the queue is empty (a line is never split: it fits in the buffer).
    let stderr = std::io::BufWriter::with_capacity(ACCESS_WRITE_BYTES, std::io::stderr());
    let (access, guard) = access_queue(stderr, ACCESS_QUEUE_LINES);
    let _ = DROPPED.set(access.error_counter());
    tracing_subscriber::registry()
        .with(filter)
        .with(layers(format, ansi, access, std::io::stderr))
        .init();
    Logging { _access: guard }
}

/// A lossy queue of `lines` lines in front of `sink`, written by a thread of its own.
fn access_queue<W: Write + Send + 'static>(sink: W, lines: usize) -> (NonBlocking, WorkerGuard) {
    NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(lines)
        .thread_name("idemgate-access-log")
        .finish(sink)
}

/// The access log's layer on `access` and every other line's on `rest`.
fn layers<S, R>(format: LogFormat, ansi: bool, access: NonBlocking, rest: R) -> impl Layer<S>
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
    if let Some(dropped) = DROPPED.get() {
        metrics::counter!(ACCESS_LOG_DROPPED.name).absolute(dropped.dropped_lines() as u64);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

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
        let (access, guard) = access_queue(Stuck(open.clone()), 8);
        let dropped = access.error_counter();
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
        // The writer thread holds at most one line, the queue 8: the rest were dropped.
        assert!(
            dropped.dropped_lines() >= 100 - 8 - 1,
            "{}",
            dropped.dropped_lines()
        );
        let written = String::from_utf8(rest.0.lock().unwrap().clone()).unwrap();
        assert_eq!(written.lines().count(), 20, "{written}");
        assert!(
            written.lines().all(|l| l.contains("a warning")),
            "{written}"
        );
        *open.lock().unwrap() = true;
        drop(guard);
    }
}
