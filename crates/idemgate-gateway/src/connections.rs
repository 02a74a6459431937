//! The connections of every listener (the gateway's or the key service's, and the admin
//! listener): how many may be open at once and how long a client may take, and the accept
//! loop that serves them with hyper (HTTP/1.1, and HTTP/2 by its preface, as `axum::serve`
//! did), parks idle HTTP/1 connections without hyper's buffers (100 ms after their last
//! request), and drains them at shutdown.
//!
//! # What each timeout covers
//! - `header_read_timeout` ([`Limits::header_read_timeout`]): from the moment a connection is
//!   accepted (after the TLS handshake, which has its own bound,
//!   [`crate::tls::HANDSHAKE_TIMEOUT`]) until its first request head is complete; on a kept-alive
//!   connection, from the first byte of the next head until that head is complete. Past it, an
//!   HTTP/1 client gets `408` with the `request-timeout` problem and the connection closes.
//! - `body_read_timeout` ([`Limits::body_read_timeout`]): while the service waits for bytes of a
//!   request body, each byte starting it again. Past it, the request gets `408` (unless its
//!   answer had already begun) and the connection closes. A covered request's body is read whole
//!   before anything is stored or forwarded, so such a request stores and forwards nothing.
//! - `idle_timeout` ([`Limits::idle_timeout`]): a kept-alive connection between the end of a
//!   response and the first byte of the next request (on h2c: while no request is in flight).
//!   Past it, the connection closes without an answer: an answer nobody asked for could be read
//!   as the answer to a request sent at that moment.
//!
//! A request head whose first bytes arrived while the previous response was still being
//! written (pipelining) is bounded by `idle_timeout` instead of `header_read_timeout`. Time
//! spent writing a response to a client that does not read it is not bounded here.
//!
//! hyper's own `header_read_timeout` is not used: hyper 1.x starts it as soon as a kept-alive
//! connection goes idle (`proto/h1/conn.rs`: the wait for the next request counts), so it would
//! close idle keep-alive connections after `header_read_timeout` instead of `idle_timeout`, and
//! it closes without an answer. The deadlines are kept instead by a wrapper around the
//! connection (`deadline::TimedIo`), which learns from the service (`request`) whether a
//! request is in flight.
//!
//! # Open connections
//! A listener has at most `max_connections` open ([`Limits::max_connections`]; the admin
//! listener [`ADMIN_MAX_CONNECTIONS`]): the accept loop takes a connection from the kernel only
//! while fewer are open, so the others wait in the listen backlog, and nothing accepted is ever
//! closed for the limit ([`accept::Counting`]); [`bind`] gives the backlog room for
//! [`LISTEN_BACKLOG`] of them. Exported as `idempotency_connections_open`
//! (gauge) and `idempotency_connections_limit_reached_total`, by `listener` (`service`,
//! `admin`); connections closed by a timeout are counted in
//! `idempotency_connection_timeouts_total{listener,timeout}`.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::serve::Listener;
use bytes::Bytes;
use http::{Request, Response};
use idemgate_core::BoxError;
use tokio::sync::watch;

mod accept;
mod answer;
mod conn;
mod deadline;
mod reply;
mod request;
mod serving;
#[cfg(test)]
mod tests;

pub use accept::{bind, check_file_limit, files_needed, Counting, Open, LISTEN_BACKLOG};
use answer::Answers;
use conn::Conn;
use deadline::TimedIo;
pub use request::BodyReadTimeout;
use serving::Protocols;

/// Most connections open at once on the admin listener (`/healthz`, `/readyz`,
/// `/metrics`): a fixed bound, its timeouts are the configured ones.
pub const ADMIN_MAX_CONNECTIONS: usize = 128;

/// Files a process keeps open besides its listeners' connections and their upstream
/// connections: store pools, listeners, log and database files.
pub const FILE_MARGIN: usize = 256;

/// Label of the gateway's or key service's listener (`listener="service"`).
pub const SERVICE: &str = "service";

/// Label of the admin listener (`listener="admin"`).
pub const ADMIN: &str = "admin";

/// The bounds of a listener's connections (see the module documentation for what each
/// timeout covers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest wait for a whole request head. Default 10 s.
    pub header_read_timeout: Duration,
    /// Longest wait for the next bytes of a request body. Default 30 s.
    pub body_read_timeout: Duration,
    /// Longest wait for the next request on a kept-alive connection. Default 60 s.
    pub idle_timeout: Duration,
    /// Most connections open at once. Default 10,000.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_connections: 10_000,
        }
    }
}

impl Limits {
    /// The admin listener's: these timeouts, at most [`ADMIN_MAX_CONNECTIONS`].
    pub fn admin(&self) -> Self {
        Self {
            max_connections: ADMIN_MAX_CONNECTIONS,
            ..*self
        }
    }
}

/// What a listener's connections are served with: its label, its limits and its `408`
/// answers (problem `type`s under `type_base`).
#[derive(Debug, Clone)]
pub struct Listening {
    name: &'static str,
    limits: Limits,
    answers: Arc<Answers>,
}

impl Listening {
    /// The listener labelled `name` ([`SERVICE`] or [`ADMIN`]) under `limits`.
    pub fn new(name: &'static str, limits: Limits, type_base: &str) -> Self {
        Self {
            name,
            limits,
            answers: Arc::new(Answers::new(type_base, &limits)),
        }
    }
}

/// What a listener serves: a service that answers every request (axum's `Router`, or the
/// gateway's reloadable proxy), cloned for each connection. Its responses get what a server
/// adds at the top (`request::top_level`): `Content-Length` from an exact size, no body
/// for `HEAD`, none for a successful `CONNECT`.
pub trait App:
    tower::Service<
        Request<Body>,
        Response = Response<Self::ResBody>,
        Error = Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + Unpin
    + 'static
{
    /// The responses' body.
    type ResBody: hyper::body::Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static;
}

impl<S, B> App for S
where
    S: tower::Service<Request<Body>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + Unpin
        + 'static,
    S::Future: Send + 'static,
    B: hyper::body::Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static,
{
    type ResBody = B;
}

/// Bytes each request in flight on a listener serving `S` holds for its answer, besides
/// what `S`'s future holds: what a test of a service's cost reads.
#[cfg(test)]
pub(crate) const fn answer_size<S: App>() -> usize {
    std::mem::size_of::<reply::Reply<S>>()
}

/// Serves `app` on `listener`'s connections within `conf`'s timeouts until `stopped`; then
/// accepts nothing more, lets every connection finish the request it is serving (idle ones
/// close at once) and returns once all are closed.
pub async fn serve<L>(
    mut listener: L,
    app: impl App,
    conf: Listening,
    stopped: impl Future<Output = ()>,
) where
    L: Listener<Addr = SocketAddr>,
{
    let protocols = Arc::new(Protocols::new());
    let (stop, stopping) = watch::channel(());
    let mut stopped = pin!(stopped);
    loop {
        let (io, addr) = tokio::select! {
            conn = listener.accept() => conn,
            () = &mut stopped => break,
        };
        let conn = Arc::new(Conn::default());
        let io = TimedIo::new(io, conn.clone(), &conf);
        let service = request::service(app.clone(), addr, conn.clone(), conf.clone());
        let (protocols, stopping) = (protocols.clone(), stopping.clone());
        tokio::spawn(serving::run(io, service, conn, protocols, stopping));
    }
    drop((listener, stopping));
    // Every connection's task holds a receiver: all have ended once none is left.
    let _ = stop.send(());
    stop.closed().await;
}
