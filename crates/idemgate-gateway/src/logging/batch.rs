//! The log's writer: a bounded buffer that the logging threads append whole lines to,
//! written out by a thread of its own in batches, so no logging thread writes to stderr
//! itself (a blocked stderr would stop it, and with it the requests of its runtime).
//!
//! A logging thread appends its line under a lock and returns; it wakes the writer thread
//! only when the buffer was empty or the line must not wait. For access lines the writer
//! then waits [`Batch::new`]'s `gather` for more and writes everything that queued up in one
//! `write`: under load one wake-up and one write per `gather` instead of one per line (a
//! wake-up per line was an eighth of a proxied request's system calls); idle, the thread
//! sleeps until a line comes. Any other line is written at once.
//!
//! Access lines ([`Batch::access`]) fill the buffer up to its `limit`; one that would take it
//! further is dropped and counted ([`Batch::dropped`]). Other lines ([`Batch::other`]) are
//! never dropped: they may use a `reserve` beyond the limit, and only when that is full too
//! (stderr blocked for that long) does the logging thread wait for room. Dropping the
//! [`BatchGuard`] writes out what is left (waiting at most [`WRITE_OUT_WAIT`], so a stderr
//! blocked for good does not keep the process from exiting); lines logged after that are
//! written by their own thread.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// The lines waiting for the writer thread, shared with every logging thread.
#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Signalled when a line lands in an empty buffer, when one must not wait, and at close.
    ready: Condvar,
    /// Signalled when the writer has taken the buffer.
    room: Condvar,
    /// Access lines dropped because the buffer was full (or the writer gone).
    dropped: AtomicU64,
    /// The most bytes of the buffer access lines may fill.
    limit: usize,
    /// Bytes beyond `limit` that other lines may fill before their threads wait.
    reserve: usize,
}

#[derive(Debug, Default)]
struct State {
    buf: Vec<u8>,
    /// A line that must not wait for the gathering is in `buf`.
    urgent: bool,
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends one line (one `write` call of the fmt layer: a whole formatted event).
    fn append(&self, line: &[u8], access: bool) {
        if access {
            self.append_access(line)
        } else {
            self.append_other(line)
        }
    }

    /// Appends an access line, or counts it dropped.
    fn append_access(&self, line: &[u8]) {
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

    /// Appends any other line, waiting for room while the buffer and its reserve are full.
    fn append_other(&self, line: &[u8]) {
        let mut state = self.lock();
        loop {
            if state.closed {
                drop(state);
                let _ = std::io::stderr().write_all(line);
                return;
            }
            let fits = state.buf.len() + line.len() <= self.limit + self.reserve;
            if fits || state.buf.is_empty() {
                break;
            }
            state = self.room.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.buf.extend_from_slice(line);
        state.urgent = true;
        drop(state);
        self.ready.notify_one();
    }
}

/// The log's writer: each event's line is appended to the shared buffer, through
/// [`Batch::access`] or [`Batch::other`]. Cloning shares the buffer.
#[derive(Clone, Debug)]
pub(crate) struct Batch {
    shared: Arc<Shared>,
}

/// The [`MakeWriter`] of access lines (lossy) or of other lines (never dropped).
#[derive(Clone, Debug)]
pub(crate) struct Lines {
    shared: Arc<Shared>,
    access: bool,
}

/// How long dropping the [`BatchGuard`] waits for the buffer to be written out: a stderr
/// blocked for good must not keep the process from exiting.
const WRITE_OUT_WAIT: Duration = Duration::from_secs(2);

/// Keeps the writer thread: dropping it writes out the buffer, waiting up to
/// [`WRITE_OUT_WAIT`] for the thread to finish.
#[derive(Debug)]
pub(crate) struct BatchGuard {
    shared: Arc<Shared>,
    /// Disconnected when the writer thread ends.
    finished: Option<Receiver<()>>,
}

impl Batch {
    /// A buffer in front of `sink` of `limit` bytes for access lines and `reserve` more for
    /// the others, written by the thread `name`, access lines at most once per `gather`
    /// while they keep coming.
    ///
    /// # Panics
    /// When the thread cannot be spawned (at start-up, as `std::thread::spawn`).
    pub(crate) fn new<W>(
        sink: W,
        (limit, reserve): (usize, usize),
        gather: Duration,
        name: &str,
    ) -> (Self, BatchGuard)
    where
        W: Write + Send + 'static,
    {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            ready: Condvar::new(),
            room: Condvar::new(),
            dropped: AtomicU64::new(0),
            limit,
            reserve,
        });
        let writer = shared.clone();
        let (done, finished) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let _done = done; // dropped when the thread ends
                write_batches(&writer, sink, gather)
            })
            .expect("spawn the log's writer thread");
        let guard = BatchGuard {
            shared: shared.clone(),
            finished: Some(finished),
        };
        (Self { shared }, guard)
    }

    /// Access lines dropped so far because the buffer was full.
    pub(crate) fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// The writer of access lines: dropped when the buffer is full.
    pub(crate) fn access(&self) -> Lines {
        self.lines(true)
    }

    /// The writer of every other line: never dropped.
    pub(crate) fn other(&self) -> Lines {
        self.lines(false)
    }

    fn lines(&self, access: bool) -> Lines {
        Lines {
            shared: self.shared.clone(),
            access,
        }
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
        if !state.closed && !state.urgent {
            drop(state);
            std::thread::sleep(gather);
            state = shared.lock();
        }
        std::mem::swap(&mut state.buf, &mut out);
        state.urgent = false;
        drop(state);
        shared.room.notify_all();
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
        self.shared.room.notify_all();
        if let Some(finished) = self.finished.take() {
            // Disconnected (an error) when the thread has ended; a timeout leaves it behind.
            let _ = finished.recv_timeout(WRITE_OUT_WAIT);
        }
    }
}

/// One event's writer: its line goes to the buffer in one piece.
#[derive(Debug)]
pub(crate) struct Line<'a> {
    shared: &'a Shared,
    access: bool,
}

impl Write for Line<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.shared.append(buf, self.access);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Lines {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        Line {
            shared: &self.shared,
            access: self.access,
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    /// A sink that takes nothing until [`Gate::let_through`] (stderr behind a stuck pipe),
    /// then keeps what it is given; the logging module's tests use it too.
    #[derive(Clone, Default)]
    pub(in crate::logging) struct Gate {
        open: Arc<AtomicBool>,
        kept: Arc<Mutex<Vec<u8>>>,
    }

    impl Gate {
        /// A gate already open.
        pub(in crate::logging) fn opened() -> Self {
            let gate = Self::default();
            gate.let_through();
            gate
        }

        /// Opens the gate: writes waiting and to come go through.
        pub(in crate::logging) fn let_through(&self) {
            self.open.store(true, Ordering::SeqCst);
        }

        /// What went through, as text.
        pub(in crate::logging) fn text(&self) -> String {
            String::from_utf8(self.kept.lock().unwrap().clone()).unwrap()
        }
    }

    impl Write for Gate {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            while !self.open.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
            }
            self.kept.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn other_lines_wait_for_room_only_past_the_reserve() {
        let gate = Gate::default();
        let gather = Duration::from_millis(10);
        let (writer, guard) = Batch::new(gate.clone(), (100, 100), gather, "t");
        let line = [b'w'; 80];
        let write = |lines: &Lines| lines.make_writer().write_all(&line).unwrap();
        write(&writer.other());
        // Once the writer thread holds that line (stuck on the gate), two more fit in the
        // limit and its reserve, and an access line no longer fits in the limit.
        for _ in 0..2000 {
            if writer.shared.lock().buf.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        write(&writer.other());
        write(&writer.access());
        assert_eq!(writer.dropped(), 1);
        write(&writer.other());
        let fourth = std::thread::spawn({
            let other = writer.other();
            move || other.make_writer().write_all(&[b'w'; 80]).unwrap()
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(!fourth.is_finished(), "a line past the reserve must wait");
        gate.let_through();
        fourth.join().unwrap();
        drop(guard);
        assert_eq!(gate.kept.lock().unwrap().len(), 4 * 80);
        assert_eq!(writer.dropped(), 1);
    }

    #[test]
    fn a_stderr_blocked_for_good_does_not_keep_the_guard_from_returning() {
        let gate = Gate::default(); // never opened
        let gather = Duration::from_millis(10);
        let (writer, guard) = Batch::new(gate.clone(), (100, 100), gather, "t");
        writer.other().make_writer().write_all(b"stuck\n").unwrap();
        // Returns after WRITE_OUT_WAIT; before, it joined a thread stuck in write forever.
        drop(guard);
        assert!(gate.kept.lock().unwrap().is_empty());
    }
}
