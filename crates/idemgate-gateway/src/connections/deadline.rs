//! `header_read_timeout` and `idle_timeout`: the connection's read deadline, kept by a
//! wrapper around it ([`TimedIo`]) that knows from the requests ([`Conn`]) whether one is in
//! flight (then there is no read deadline here: the body has its own).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use futures_util::task::AtomicWaker;
use std::future::Future;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::answer::Answers;
use super::{Limits, Listening};
use crate::telemetry::CONNECTION_TIMEOUTS;

/// What a connection's [`TimedIo`] and its requests share.
#[derive(Debug, Default)]
pub(crate) struct Conn {
    /// Requests whose response has not ended.
    in_flight: AtomicUsize,
    /// Counts the times the last request in flight ended: the connection went idle.
    idled: AtomicU64,
    /// The connection's task, woken when it goes idle so that its read deadline starts.
    waker: AtomicWaker,
}

impl Conn {
    /// A request begins; it is in flight until the guard is dropped.
    pub(crate) fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, SeqCst);
        InFlight(self.clone())
    }
}

/// A request in flight on its connection ([`Conn::begin`]), until dropped.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Conn>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, SeqCst) == 1 {
            self.0.idled.fetch_add(1, SeqCst);
            self.0.waker.wake();
        }
    }
}

/// What the read deadline waits for while no request is in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// A whole request head (`header_read_timeout`).
    Head,
    /// The first byte of the next request (`idle_timeout`).
    Idle,
}

/// How far the close after a timeout got.
#[derive(Debug)]
enum Closing {
    /// Writing the `408` (what is left of it).
    Answer(Bytes),
    Shutdown,
    Closed,
}

/// A connection with its read deadline: while no request is in flight, reading waits at
/// most `header_read_timeout` for a head (from the accept, then from a head's first byte) or
/// `idle_timeout` for the next request. Past it the connection answers `408` (a head that
/// did not arrive, on HTTP/1), shuts down, and reads as closed.
#[derive(Debug)]
pub(crate) struct TimedIo<IO> {
    io: IO,
    conn: Arc<Conn>,
    limits: Limits,
    answers: Arc<Answers>,
    listener: &'static str,
    wait: Wait,
    /// [`Conn::idled`] when last seen.
    idled: u64,
    /// When the wait ends.
    due: Instant,
    /// The timer: it never fires after `due`, but may fire before it (a later `due` does not
    /// reset it, which would cost a timer-wheel update per request); then it is set to `due`.
    timer: Pin<Box<Sleep>>,
    /// How many bytes of h2c's preface (`PRI`) the connection began with; 3 once decided.
    sniffed: u8,
    h2: bool,
    closing: Option<Closing>,
}

impl<IO> TimedIo<IO> {
    /// Wraps `io`, a connection just accepted, under `conf`'s limits.
    pub(crate) fn new(io: IO, conn: Arc<Conn>, conf: &Listening) -> Self {
        let due = Instant::now() + conf.limits.header_read_timeout;
        Self {
            io,
            conn,
            limits: conf.limits,
            answers: conf.answers.clone(),
            listener: conf.name,
            wait: Wait::Head,
            idled: 0,
            due,
            timer: Box::pin(tokio::time::sleep_until(due)),
            sniffed: 0,
            h2: false,
            closing: None,
        }
    }

    /// Whether no request is in flight; the first time since the last one ended, the
    /// deadline becomes `idle_timeout` from now.
    fn idle(&mut self) -> bool {
        if self.conn.in_flight.load(SeqCst) > 0 {
            return false;
        }
        let idled = self.conn.idled.load(SeqCst);
        if idled != self.idled {
            self.idled = idled;
            self.wait = Wait::Idle;
            self.wait_until(Instant::now() + self.limits.idle_timeout);
        }
        true
    }

    /// The wait ends at `due`; the timer is reset only when it would fire after it.
    fn wait_until(&mut self, due: Instant) {
        self.due = due;
        if self.timer.deadline() > due {
            self.timer.as_mut().reset(due);
        }
    }

    /// Whether the wait is over (the timer fired at `due`); a timer that fired earlier is
    /// set to `due`.
    fn poll_due(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        while self.timer.as_mut().poll(cx).is_ready() {
            if self.timer.deadline() >= self.due {
                return Poll::Ready(());
            }
            let due = self.due;
            self.timer.as_mut().reset(due);
        }
        Poll::Pending
    }

    /// Bytes arrived: on an idle HTTP/1 connection they begin a head, which then has
    /// `header_read_timeout`.
    fn on_read(&mut self, bytes: &[u8]) {
        self.sniff(bytes);
        if self.idle() && self.wait == Wait::Idle && !self.h2 {
            self.wait = Wait::Head;
            self.wait_until(Instant::now() + self.limits.header_read_timeout);
        }
    }

    /// Tells an h2c connection (its preface begins `PRI`) from HTTP/1 by its first bytes.
    fn sniff(&mut self, bytes: &[u8]) {
        for &b in bytes
            .iter()
            .take(3usize.saturating_sub(self.sniffed.into()))
        {
            if b != b"PRI"[usize::from(self.sniffed)] {
                self.sniffed = 3;
                return;
            }
            self.sniffed += 1;
            self.h2 = self.sniffed == 3;
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> TimedIo<IO> {
    /// The read found nothing: past the deadline (no request in flight), begins the close.
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Registered before looking, so a request that ends meanwhile wakes this task.
        self.conn.waker.register(cx.waker());
        if !self.idle() || self.poll_due(cx).is_pending() {
            return Poll::Pending;
        }
        let answer = self.wait == Wait::Head && !self.h2;
        let kind = match self.wait {
            Wait::Head => "header",
            Wait::Idle => "idle",
        };
        let labels = [("listener", self.listener), ("timeout", kind)];
        metrics::counter!(CONNECTION_TIMEOUTS.name, &labels).increment(1);
        tracing::debug!(
            listener = self.listener,
            timeout = kind,
            "closing a connection"
        );
        self.closing = Some(match answer {
            true => Closing::Answer(self.answers.head_timeout()),
            false => Closing::Shutdown,
        });
        self.poll_close(cx)
    }

    /// Writes the answer (if any), shuts the connection down, then reads as closed. A
    /// failed write or shutdown ends it too.
    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let Some(closing) = &mut self.closing else {
                return Poll::Ready(Ok(()));
            };
            let next = match closing {
                Closing::Answer(rest) if !rest.is_empty() => {
                    match ready!(Pin::new(&mut self.io).poll_write(cx, rest)) {
                        Ok(n) if n > 0 => {
                            rest.advance(n);
                            continue;
                        }
                        _ => Closing::Closed,
                    }
                }
                Closing::Answer(_) => match ready!(Pin::new(&mut self.io).poll_flush(cx)) {
                    Ok(()) => Closing::Shutdown,
                    Err(_) => Closing::Closed,
                },
                Closing::Shutdown => {
                    let _ = ready!(Pin::new(&mut self.io).poll_shutdown(cx));
                    Closing::Closed
                }
                Closing::Closed => return Poll::Ready(Ok(())),
            };
            self.closing = Some(next);
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for TimedIo<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.closing.is_some() {
            return this.poll_close(cx);
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.on_read(&buf.filled()[before..]);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => this.poll_deadline(cx),
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TimedIo<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.closing.is_some() {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.closing.is_some() {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.closing.is_some() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.closing.is_some() {
            return this.poll_close(cx);
        }
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}
