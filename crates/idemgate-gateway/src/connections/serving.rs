//! One connection's life. HTTP/2 (its preface first, RFC 9113 section 3.4) is served by one
//! hyper connection to the end. HTTP/1 is served by a hyper connection for each stretch of
//! requests: once the last request has ended and nothing more has come, the connection is
//! **parked**. hyper lets it go (its read and write buffers, 8 KiB each, and its state are
//! freed) and the connection waits with nothing but its socket and deadline
//! ([`TimedIo::fill`]) until the client's next bytes come; a new hyper connection then reads
//! them first. A connection is parked only when its last request's body was read to the end
//! and neither side asked to close ([`Conn::reusable`]); anything else ends as hyper ends it.

use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::Arc;

use hyper::body::{Body, Incoming};
use hyper::server::conn::{http1, http2};
use hyper::service::HttpService;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use super::conn::Conn;
use super::deadline::TimedIo;
use idemgate_core::BoxError;

/// Largest read buffer of an HTTP/1 connection, bytes: hyper grows it while reads fill it
/// (a large body), up to this. A request head must fit in it (else `431`).
pub(super) const MAX_BUF_SIZE: usize = 64 << 10;

/// hyper's builders, made once per listener.
#[derive(Debug)]
pub(super) struct Protocols {
    h1: http1::Builder,
    h2: http2::Builder<TokioExecutor>,
}

impl Protocols {
    pub(super) fn new() -> Self {
        let mut h1 = http1::Builder::new();
        h1.max_buf_size(MAX_BUF_SIZE);
        let mut h2 = http2::Builder::new(TokioExecutor::new());
        // As `axum::serve`: CONNECT for HTTP/2 websockets (RFC 8441).
        h2.enable_connect_protocol();
        Self { h1, h2 }
    }
}

/// Serves the connection `io` until it ends or `stop` changes; then an idle (or parked)
/// connection closes at once and one with a request in flight after its response.
pub(super) async fn run<IO, S, B>(
    mut io: TimedIo<IO>,
    mut service: S,
    conn: Arc<Conn>,
    protocols: Arc<Protocols>,
    mut stop: watch::Receiver<()>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: HttpService<Incoming, ResBody = B> + Unpin + Send + 'static,
    S::Future: Unpin + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let mut stopped = pin!(stop.changed());
    let mut first = true;
    loop {
        if !io.has_unread() {
            let filled = tokio::select! {
                filled = io.fill() => filled,
                _ = &mut stopped => break,
            };
            if !matches!(filled, Ok(true)) {
                break;
            }
        }
        if std::mem::take(&mut first) && io.begins_h2() {
            return Box::pin(serve_h2(io, service, &protocols.h2, stopped)).await;
        }
        // Boxed: hyper's connection is large, and a parked connection's task keeps no room
        // for it.
        let h1 = Box::pin(serve_h1(
            io,
            service,
            &protocols.h1,
            &conn,
            stopped.as_mut(),
        ));
        match h1.await {
            H1::Parked(parts) => (io, service) = parts,
            H1::Ended(ended) => {
                io = ended;
                break;
            }
            H1::Failed => return,
        }
    }
    let _ = io.shutdown().await;
}

/// How a stretch of HTTP/1 requests ended.
enum H1<IO, S> {
    /// The connection waits for its next request (its unparsed bytes read again first).
    Parked((TimedIo<IO>, S)),
    /// hyper ended it (the client closed, a request or response asked to close, or the
    /// listener stops): it is to be shut down.
    Ended(TimedIo<IO>),
    /// It failed (a malformed request, a write error): dropped, as hyper would.
    Failed,
}

/// Serves HTTP/1 requests on `io` until the connection is to be parked
/// ([`Conn::take_park`], after which hyper closes it as idle), hyper ends it, or `stopped`
/// (then hyper finishes the request in flight, answering with `Connection: close`).
async fn serve_h1<IO, S, B>(
    io: TimedIo<IO>,
    service: S,
    h1: &http1::Builder,
    conn: &Conn,
    mut stopped: Pin<&mut impl Future>,
) -> H1<IO, S>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: HttpService<Incoming, ResBody = B> + Unpin,
    S::Future: Unpin,
    B: Body + 'static,
    B::Error: Into<BoxError>,
{
    conn.serving();
    let mut hyper = h1.serve_connection(TokioIo::new(io), service);
    let (mut parking, mut stopping) = (false, false);
    let served = poll_fn(|cx| {
        if !stopping && stopped.as_mut().poll(cx).is_ready() {
            stopping = true;
            Pin::new(&mut hyper).graceful_shutdown();
        }
        let polled = hyper.poll_without_shutdown(cx);
        if polled.is_ready() || stopping || parking || !conn.take_park() {
            return polled;
        }
        parking = true;
        Pin::new(&mut hyper).graceful_shutdown();
        // An idle hyper connection ends at once; one that is not (a head begun, a response
        // not flushed) answers what it reads with `Connection: close`.
        let polled = hyper.poll_without_shutdown(cx);
        if polled.is_pending() {
            conn.set_park_failed();
        }
        polled
    })
    .await;
    if let Err(e) = served {
        tracing::trace!(error = %e, "connection ended with an error");
        return H1::Failed;
    }
    let parts = hyper.into_parts();
    let mut io = parts.io.into_inner();
    if !parking || conn.park_failed() || stopping || !conn.reusable() {
        return H1::Ended(io);
    }
    io.count_park();
    io.unread(parts.read_buf);
    H1::Parked((io, parts.service))
}

/// Serves an HTTP/2 connection to its end; once `stopped`, hyper sends `GOAWAY` and ends
/// it when the streams in flight have.
async fn serve_h2<IO, S, B>(
    io: TimedIo<IO>,
    service: S,
    h2: &http2::Builder<TokioExecutor>,
    mut stopped: Pin<&mut impl Future>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: HttpService<Incoming, ResBody = B> + Send + 'static,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let mut hyper = pin!(h2.serve_connection(TokioIo::new(io), service));
    let mut stopping = false;
    let served = poll_fn(|cx| {
        if !stopping && stopped.as_mut().poll(cx).is_ready() {
            stopping = true;
            hyper.as_mut().graceful_shutdown();
        }
        hyper.as_mut().poll(cx)
    })
    .await;
    if let Err(e) = served {
        tracing::trace!(error = %e, "connection ended with an error");
    }
}
