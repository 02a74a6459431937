//! The access log's writer: a bounded buffer that the logging threads append whole lines
//! to, written out by a thread of its own in batches.
//!
//! A logging thread appends its line under a lock and returns; it wakes the writer thread
//! only when the buffer was empty. The writer then waits [`Batch::new`]'s `gather` for more
//! lines and writes everything that queued up in one `write`. Under load that is one wake-up
//! and one write per `gather` instead of one per line (a wake-up per line cost a proxied
//! request about a fifth of its CPU); idle, the thread sleeps until a line comes.
//!
//! A line that would take the buffer past its limit is dropped and counted
//! ([`Batch::dropped`]): the requests never wait for stderr. Dropping the [`BatchGuard`]
//! writes out what is left.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// The lines waiting for the writer thread, shared with every logging thread.
#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Signalled when a line lands in an empty buffer, and at close.
    ready: Condvar,
    /// Lines dropped because the buffer was full (or the writer gone).
    dropped: AtomicU64,
    /// The most bytes the buffer holds.
    limit: usize,
}

#[derive(Debug, Default)]
struct State {
    buf: Vec<u8>,
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends one line (one `write` call of the fmt layer: a whole formatted event), or
    /// counts it dropped.
    fn append(&self, line: &[u8]) {
        let mut state = self.lock();
        if state.closed || state.buf.len() + line.len() > self.limit {
            drop(state);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let wake = state.buf.is_empty();
        state.buf.extend_from_slice(line);
        drop(state);
        if wake {
            self.ready.notify_one();
        }
    }
}

/// The access log's [`MakeWriter`]: each event's line is appended to the shared buffer.
/// Cloning shares the buffer.
#[derive(Clone, Debug)]
pub(crate) struct Batch {
    shared: Arc<Shared>,
}

/// Keeps the writer thread: dropping it writes out the buffer and joins the thread.
#[derive(Debug)]
pub(crate) struct BatchGuard {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Batch {
    /// A buffer of at most `limit` bytes in front of `sink`, written by the thread `name`
    /// at most once per `gather` while lines keep coming.
    ///
    /// # Panics
    /// When the thread cannot be spawned (at start-up, as `std::thread::spawn`).
    pub(crate) fn new<W>(sink: W, limit: usize, gather: Duration, name: &str) -> (Self, BatchGuard)
    where
        W: Write + Send + 'static,
    {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            ready: Condvar::new(),
            dropped: AtomicU64::new(0),
            limit,
        });
        let writer = shared.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || write_batches(&writer, sink, gather))
            .expect("spawn the access log's writer thread");
        let guard = BatchGuard {
            shared: shared.clone(),
            thread: Some(thread),
        };
        (Self { shared }, guard)
    }

    /// Lines dropped so far because the buffer was full.
    pub(crate) fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }
}

/// The writer thread: waits for a line, gathers for `gather`, writes the batch; until the
/// guard closes the buffer and it is empty.
fn write_batches<W: Write>(shared: &Shared, mut sink: W, gather: Duration) {
    let mut out = Vec::new();
    loop {
        let mut state = shared.lock();
        while state.buf.is_empty() && !state.closed {
            state = shared.ready.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        if state.buf.is_empty() {
            return; // closed and written out
        }
        if !state.closed {
            drop(state);
            std::thread::sleep(gather);
            state = shared.lock();
        }
        std::mem::swap(&mut state.buf, &mut out);
        drop(state);
        // Nothing to do about a failed write to stderr: the lines are lost either way.
        let _ = sink.write_all(&out).and_then(|()| sink.flush());
        out.clear();
        // A spike's buffer is given back rather than kept for good.
        if out.capacity() > 1 << 20 {
            out = Vec::new();
        }
    }
}

impl Drop for BatchGuard {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.ready.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One event's writer: its line goes to the buffer in one piece.
#[derive(Debug)]
pub(crate) struct Line<'a>(&'a Shared);

impl Write for Line<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.append(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Batch {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        Line(&self.shared)
    }
}
