//! `header_read_timeout` and `idle_timeout`: the connection's read deadline, kept by a
//! wrapper around it ([`TimedIo`]) that knows from the requests ([`Conn`]) whether one is in
//! flight (then there is no read deadline here: the body has its own).

use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use std::future::Future;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::answer::Answers;
use super::conn::Conn;
use super::{Limits, Listening};
use crate::telemetry::{CONNECTIONS_PARKED, CONNECTION_TIMEOUTS};

/// HTTP/2's connection preface (RFC 9113 section 3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How long a kept-alive connection is idle before it is parked: a client sending its
/// requests one after another keeps its hyper connection (building one per request costs
/// about 4 % more instructions per request); an idle one gives it up soon after.
const PARK_AFTER: Duration = Duration::from_millis(100);

/// Most bytes read at once while parked ([`TimedIo::fill`]): a request head of this size or
/// less arrives in one read, as hyper's first read of 8 KiB would take it.
const PARKED_READ: usize = 4096;

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
    /// When an idle connection is to be parked ([`PARK_AFTER`] after its last request).
    park_at: Instant,
    /// The timer: it never fires after `due`, but may fire before it (a later `due` does not
    /// reset it, which would cost a timer-wheel update per request); then it is set to `due`.
    timer: Pin<Box<Sleep>>,
    /// How many bytes of h2c's preface (`PRI`) the connection began with; 3 once decided.
    sniffed: u8,
    h2: bool,
    closing: Option<Closing>,
    /// Bytes read while the connection was parked ([`TimedIo::fill`]) or left unparsed by
    /// hyper: read again first.
    prefix: Bytes,
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
            park_at: due,
            timer: Box::pin(tokio::time::sleep_until(due)),
            sniffed: 0,
            h2: false,
            closing: None,
            prefix: Bytes::new(),
        }
    }

    /// Counts the connection parked, in `idempotency_connections_parked_total`.
    pub(crate) fn count_park(&self) {
        let labels = [("listener", self.listener)];
        metrics::counter!(CONNECTIONS_PARKED.name, &labels).increment(1);
    }

    /// Whether bytes read earlier are waiting to be read again ([`Self::unread`]).
    pub(crate) fn has_unread(&self) -> bool {
        !self.prefix.is_empty()
    }

    /// `bytes` (what hyper read and did not parse) are read again first.
    /// They begin the next head: that head is waited for (`header_read_timeout`) and the
    /// connection is not parked again before it ends.
    pub(crate) fn unread(&mut self, bytes: Bytes) {
        debug_assert!(self.prefix.is_empty());
        // An empty `Bytes` can still hold hyper's whole read buffer: not kept.
        if !bytes.is_empty() {
            self.prefix = bytes;
            self.wait = Wait::Head;
            self.wait_until(Instant::now() + self.limits.header_read_timeout);
        }
    }

    /// Whether the connection began with HTTP/2's whole connection preface (RFC 9113
    /// section 3.4: prior knowledge, h2c or h2 by ALPN alike).
    pub(crate) fn begins_h2(&self) -> bool {
        self.prefix.starts_with(H2_PREFACE)
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
            let now = Instant::now();
            self.park_at = now + PARK_AFTER.min(self.limits.idle_timeout);
            self.wait_until(now + self.limits.idle_timeout);
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

impl<IO: AsyncRead + AsyncWrite + Unpin> TimedIo<IO> {
    /// Waits, with no buffer of hyper's, for the connection's next bytes (up to
    /// [`PARKED_READ`] at a time, until they are more than the start of HTTP/2's preface),
    /// which are then read again first. `false` when the connection ended instead: the
    /// client closed it, or its read deadline passed (and the close began).
    pub(crate) async fn fill(&mut self) -> io::Result<bool> {
        loop {
            let got = std::future::poll_fn(|cx| {
                let mut space = [std::mem::MaybeUninit::<u8>::uninit(); PARKED_READ];
                let mut buf = ReadBuf::uninit(&mut space);
                ready!(self.poll_read_io(cx, &mut buf, false))?;
                Poll::Ready(Ok::<_, io::Error>(Bytes::copy_from_slice(buf.filled())))
            })
            .await?;
            if got.is_empty() {
                return Ok(false);
            }
            self.prefix = match self.prefix.is_empty() {
                true => got,
                false => [&self.prefix[..], &got[..]].concat().into(),
            };
            let undecided =
                self.prefix.len() < H2_PREFACE.len() && H2_PREFACE.starts_with(&self.prefix);
            if !undecided || self.idled > 0 {
                return Ok(true);
            }
        }
    }

    /// Reads from the connection within its deadline. With `may_park`, on an idle HTTP/1
    /// connection that nothing has been read from since its last request ended and that
    /// the request left [`reusable`](Conn::reusable), asks for the connection to be parked
    /// ([`Conn::take_park`]) instead of waiting.
    fn poll_read_io(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
        may_park: bool,
    ) -> Poll<io::Result<()>> {
        if self.closing.is_some() {
            return self.poll_close(cx);
        }
        let before = buf.filled().len();
        match Pin::new(&mut self.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    self.on_read(&buf.filled()[before..]);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending if may_park && self.parkable() => self.poll_park(cx),
            Poll::Pending => self.poll_deadline(cx),
        }
    }

    /// Asks for the connection to be parked once it has been idle [`PARK_AFTER`]; until then
    /// the timer wakes the task at that time.
    fn poll_park(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            if self.timer.deadline() > self.park_at {
                let at = self.park_at;
                self.timer.as_mut().reset(at);
            }
            if self.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if self.timer.deadline() >= self.park_at {
                self.conn.park.store(true, SeqCst);
                // The read deadline holds whether the park happens or not.
                return self.poll_deadline(cx);
            }
            // It fired for an earlier wait.
            let at = self.park_at;
            self.timer.as_mut().reset(at);
        }
    }

    /// Whether the connection is idle since its last request ended, with nothing read since
    /// and the request having left it reusable.
    fn parkable(&mut self) -> bool {
        !self.h2
            && self.idle()
            && self.wait == Wait::Idle
            && self.conn.reusable()
            && !self.conn.park_failed()
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for TimedIo<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.prefix.is_empty() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix.split_to(n));
            if this.prefix.is_empty() {
                // What is left would still hold the buffer it was read into.
                this.prefix = Bytes::new();
            }
            return Poll::Ready(Ok(()));
        }
        this.poll_read_io(cx, buf, true)
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
