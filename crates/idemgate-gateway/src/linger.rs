//! Lingering close, as nginx's `lingering_close`: an answer sent before the request body was
//! read (a `413` by `Content-Length`, a `400` for a missing key) must reach a client that is
//! still sending.
//!
//! Closing a socket with unread data makes the kernel send a reset, and a client that is
//! still writing its body then sees "connection reset" instead of the answer already sent
//! (and a retrying client retries). So when hyper closes a connection, [`Lingering`] first
//! shuts down the write side (the answer and a FIN go out), then reads and discards what the
//! client still sends until it closes its side, for at most [`Linger::max_bytes`] and
//! [`Linger::max_time`] (and [`Linger::idle`] between reads), and only then closes.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::time::{Instant, Sleep};

/// The bounds of a lingering close.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Linger {
    /// Longest linger in all. Default 5 s.
    pub max_time: Duration,
    /// Longest wait for the client's next bytes (or its close). Default 2 s.
    pub idle: Duration,
    /// Most bytes read and discarded. Default 64 MiB.
    pub max_bytes: u64,
}

impl Default for Linger {
    fn default() -> Self {
        Self {
            max_time: Duration::from_secs(5),
            idle: Duration::from_secs(2),
            max_bytes: 64 << 20,
        }
    }
}

/// A listener (a TCP listener by default) whose connections linger on close
/// ([`Lingering`]); an [`axum::serve::Listener`].
#[derive(Debug)]
pub struct LingerListener<L = TcpListener> {
    inner: L,
    linger: Linger,
}

impl<L> LingerListener<L> {
    /// Wraps `inner`; its connections linger within `linger`.
    pub fn new(inner: L, linger: Linger) -> Self {
        Self { inner, linger }
    }
}

impl<L: axum::serve::Listener> axum::serve::Listener for LingerListener<L> {
    type Io = Lingering<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, L::Addr) {
        // The inner listener's accept (axum's for TCP: it logs and backs off on accept
        // errors, e.g. EMFILE).
        let (io, addr) = self.inner.accept().await;
        (Lingering::new(io, self.linger), addr)
    }

    fn local_addr(&self) -> io::Result<L::Addr> {
        self.inner.local_addr()
    }
}

/// A connection that lingers when shut down (see the module documentation).
#[derive(Debug)]
pub struct Lingering<IO> {
    io: IO,
    linger: Linger,
    state: State,
}

#[derive(Debug)]
enum State {
    Open,
    Draining {
        deadline: Pin<Box<Sleep>>,
        idle: Pin<Box<Sleep>>,
        read: u64,
    },
    Closed,
}

impl<IO> Lingering<IO> {
    /// Wraps `io`.
    pub fn new(io: IO, linger: Linger) -> Self {
        Self {
            io,
            linger,
            state: State::Open,
        }
    }

    /// The wrapped connection.
    pub fn get_ref(&self) -> &IO {
        &self.io
    }
}

impl<IO: AsyncRead + Unpin> Lingering<IO> {
    /// Reads and discards until the client closes, errs, or a bound is reached.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let State::Draining {
            deadline,
            idle,
            read,
        } = &mut self.state
        else {
            return Poll::Ready(());
        };
        let mut scratch = [0u8; 8192];
        loop {
            let mut buf = ReadBuf::new(&mut scratch);
            match Pin::new(&mut self.io).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if buf.filled().is_empty() => return Poll::Ready(()),
                Poll::Ready(Ok(())) => {
                    *read += buf.filled().len() as u64;
                    if *read >= self.linger.max_bytes || deadline.is_elapsed() {
                        return Poll::Ready(());
                    }
                    idle.as_mut().reset(Instant::now() + self.linger.idle);
                }
                Poll::Ready(Err(_)) => return Poll::Ready(()),
                Poll::Pending => {
                    if deadline.as_mut().poll(cx).is_ready() || idle.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(());
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Lingering<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Lingering<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    /// Sends the FIN, then lingers (reads and discards within the bounds) before reporting
    /// the connection shut down.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match this.state {
                State::Open => {
                    let shut = ready!(Pin::new(&mut this.io).poll_shutdown(cx));
                    if shut.is_err() {
                        this.state = State::Closed;
                        return Poll::Ready(shut);
                    }
                    let now = Instant::now();
                    this.state = State::Draining {
                        deadline: Box::pin(tokio::time::sleep_until(now + this.linger.max_time)),
                        idle: Box::pin(tokio::time::sleep_until(now + this.linger.idle)),
                        read: 0,
                    };
                }
                State::Draining { .. } => {
                    ready!(this.poll_drain(cx));
                    this.state = State::Closed;
                }
                State::Closed => return Poll::Ready(Ok(())),
            }
        }
    }
}

#[cfg(test)]
mod tests;
