//! `max_connections`: a listener that accepts only while fewer connections are open, the
//! connections that count themselves, and the start-up check of the open-file limit.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::{ADMIN_MAX_CONNECTIONS, FILE_MARGIN};
use crate::telemetry::{CONNECTIONS_LIMIT_REACHED, CONNECTIONS_OPEN};

/// How often, at most, reaching the limit is logged (it is counted every time).
const WARN_EVERY: Duration = Duration::from_secs(60);

/// The listen backlog of [`bind`]: connections past `max_connections` wait there. The
/// kernel caps it at `net.core.somaxconn` (4096 by default since Linux 5.4).
pub const LISTEN_BACKLOG: u32 = 4096;

/// A TCP listener on `addr` (address reuse on, as `TcpListener::bind`) whose backlog holds
/// [`LISTEN_BACKLOG`] connections instead of the standard library's 128: past that many
/// waiting, a new client's handshake is dropped or answered with a SYN cookie, and a client
/// that sends nothing then is never accepted.
///
/// # Errors
/// The address cannot be bound (in use, not local, no permission).
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// A TCP listener with at most `max` connections open ([`Open`]): past it, [`accept`] waits
/// for one to close before taking the next from the kernel, so new clients wait in the
/// listen backlog. Each time it has to wait counts in
/// `idempotency_connections_limit_reached_total{listener}`. Accepted connections have
/// `TCP_NODELAY` set.
///
/// [`accept`]: axum::serve::Listener::accept
#[derive(Debug)]
pub struct Counting {
    inner: TcpListener,
    permits: Arc<Semaphore>,
    max: usize,
    name: &'static str,
    open: metrics::Gauge,
    warned: Option<Instant>,
}

impl Counting {
    /// Accepts on `inner`, at most `max` connections open at once, labelled `name`.
    pub fn new(inner: TcpListener, name: &'static str, max: usize) -> Self {
        let open = metrics::gauge!(CONNECTIONS_OPEN, "listener" => name);
        open.set(0.0);
        Self {
            inner,
            permits: Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS))),
            max,
            name,
            open,
            warned: None,
        }
    }

    /// Counts (and now and then logs) that the limit was reached.
    fn reached(&mut self) {
        metrics::counter!(CONNECTIONS_LIMIT_REACHED.name, "listener" => self.name).increment(1);
        let now = Instant::now();
        if self.warned.is_none_or(|at| now >= at + WARN_EVERY) {
            self.warned = Some(now);
            let addr = self.inner.local_addr().ok();
            tracing::warn!(
                listener = self.name,
                addr = ?addr,
                max_connections = self.max,
                "max_connections reached: new connections wait in the listen backlog until one closes"
            );
        }
    }
}

impl axum::serve::Listener for Counting {
    type Io = Open<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, SocketAddr) {
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                self.reached();
                let permit = self.permits.clone().acquire_owned().await;
                permit.expect("the semaphore is never closed")
            }
        };
        // axum's accept: it logs and backs off on accept errors (e.g. EMFILE).
        let (io, addr) = axum::serve::Listener::accept(&mut self.inner).await;
        let _ = io.set_nodelay(true);
        self.open.increment(1.0);
        let open = Open {
            io,
            open: self.open.clone(),
            _permit: permit,
        };
        (open, addr)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// An accepted connection: it holds its place among the listener's `max_connections` until
/// dropped, and counts in `idempotency_connections_open`.
#[derive(Debug)]
pub struct Open<IO> {
    io: IO,
    open: metrics::Gauge,
    _permit: OwnedSemaphorePermit,
}

impl<IO> Open<IO> {
    /// The connection.
    pub fn get_ref(&self) -> &IO {
        &self.io
    }
}

impl<IO> Drop for Open<IO> {
    fn drop(&mut self) {
        self.open.decrement(1.0);
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Open<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Open<IO> {
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

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// The open files a process needs at most: `max_connections` client connections, each with
/// `per_connection` files (2 for the gateway: its upstream connection), the admin listener's
/// and [`FILE_MARGIN`].
pub fn files_needed(max_connections: usize, per_connection: usize) -> u64 {
    let clients = max_connections.saturating_mul(per_connection);
    clients.saturating_add(ADMIN_MAX_CONNECTIONS + FILE_MARGIN) as u64
}

/// Reads the process's open-file limit (`RLIMIT_NOFILE`, its soft value) and logs one
/// warning naming `max_connections` and the limit when it is below [`files_needed`]: past the
/// limit accepts fail (`EMFILE`, retried every second) and so do upstream and store
/// connections. Returns the limit (`None`: unlimited, or not a Unix system).
pub fn check_file_limit(max_connections: usize, per_connection: usize) -> Option<u64> {
    let limit = file_limit()?;
    let needed = files_needed(max_connections, per_connection);
    if limit < needed {
        tracing::warn!(
            max_connections,
            file_limit = limit,
            needed,
            "the open-file limit (RLIMIT_NOFILE) is below max_connections with its upstream, \
             store and admin connections: raise it (systemd LimitNOFILE, ulimit -n) or lower \
             max_connections"
        );
    }
    Some(limit)
}

#[cfg(unix)]
fn file_limit() -> Option<u64> {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    limit.current
}

#[cfg(not(unix))]
fn file_limit() -> Option<u64> {
    None
}
