//! The wire between the gateway's real proxy (`idemgate_gateway::proxy::Proxy`) and the
//! simulated upstream: a connector whose connections are in-memory streams
//! ([`tokio::io::duplex`], which run under the paused clock), each served by hyper's
//! HTTP/1.1 server ([`crate::served`]). Connecting can be refused; the server's side of a
//! stream can be cut after a set number of bytes (a response head cut mid-way).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};

use crate::cluster::Cluster;
use crate::rng::Rng;
use crate::upstream::Upstream;

/// In percent, how often a new connection is refused (nothing is sent: "nothing done").
const REFUSED: u64 = 5;

/// What one gateway instance's connections reach: the upstream, the run's store (for its
/// trace and fault counts), the seeded source, and whether the instance still lives.
#[derive(Debug)]
pub struct Ends {
    /// The upstream.
    pub upstream: Arc<Upstream>,
    /// The store, which holds the trace.
    pub cluster: Arc<Cluster>,
    /// The seeded source.
    pub rng: Rng,
    /// The instance.
    pub instance: u64,
    /// False once the instance crashed: its answers never arrive.
    pub alive: Arc<AtomicBool>,
}

impl Ends {
    /// A crashed instance goes no further.
    pub async fn halt_if_dead(&self) {
        if !self.alive.load(Ordering::Relaxed) {
            std::future::pending::<()>().await;
        }
    }
}

/// The proxy's connector: each connection is a fresh in-memory stream to the upstream,
/// unless the connection is refused.
#[derive(Clone, Debug)]
pub struct Connector(pub Arc<Ends>);

impl tower::Service<Uri> for Connector {
    type Response = Conn;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Conn>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: Uri) -> Self::Future {
        let ends = self.0.clone();
        Box::pin(async move {
            ends.halt_if_dead().await;
            if ends.rng.chance(REFUSED) {
                ends.cluster.fault("upstream refuses the connection");
                let i = ends.instance;
                ends.cluster
                    .trace(format!("i{i} upstream refuses a connection"));
                return Err(io::ErrorKind::ConnectionRefused.into());
            }
            let (near, far) = tokio::io::duplex(16 * 1024);
            tokio::spawn(crate::served::connection(ends, far));
            Ok(Conn(TokioIo::new(near)))
        })
    }
}

/// The proxy's end of a connection.
#[derive(Debug)]
pub struct Conn(TokioIo<DuplexStream>);

impl Connection for Conn {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl Read for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl Write for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

/// How many more bytes the server may write on a connection (`None`: no limit). Once they
/// are written, the connection breaks: the proxy reads them, then the end of the stream.
pub type Budget = Arc<Mutex<Option<usize>>>;

/// The upstream's end of a connection, cut once its [`Budget`] is spent.
#[derive(Debug)]
pub struct CutIo {
    inner: DuplexStream,
    budget: Budget,
}

impl CutIo {
    /// `inner`, writing at most what `budget` allows.
    pub fn new(inner: DuplexStream, budget: Budget) -> Self {
        Self { inner, budget }
    }
}

impl AsyncRead for CutIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for CutIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let left = *this.budget.lock().unwrap_or_else(PoisonError::into_inner);
        let n = match left {
            Some(0) => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
            Some(left) => left.min(buf.len()),
            None => buf.len(),
        };
        let written = std::task::ready!(Pin::new(&mut this.inner).poll_write(cx, &buf[..n]))?;
        if let Some(left) = this
            .budget
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            *left -= written.min(*left);
        }
        Poll::Ready(Ok(written))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
