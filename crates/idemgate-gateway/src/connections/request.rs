//! Each request on a connection: counted in flight until its response ends ([`Tracked`];
//! the connection's read deadline waits meanwhile), its body read within
//! `body_read_timeout` ([`TimedBody`]), and its answer ([`super::reply`]).

use std::convert::Infallible;
use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use idemgate_core::BoxError;
use tokio::time::{Instant, Sleep};

use super::conn::{Conn, InFlight};
use super::{App, Listening};
use crate::telemetry::CONNECTION_TIMEOUTS;

/// A request's answer on its way: boxed, because hyper keeps a connection's service
/// future in a box it makes with the connection, which would otherwise hold this one's size
/// while the connection is idle.
pub(super) type Answering =
    Pin<Box<dyn Future<Output = Result<Response<Tracked>, Infallible>> + Send>>;

/// The service hyper calls for each request of a connection from `addr`.
pub(super) fn service(
    app: impl App,
    addr: SocketAddr,
    conn: Arc<Conn>,
    conf: Listening,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response<Tracked>,
    Error = Infallible,
    Future = Answering,
> + Send
       + 'static {
    hyper::service::service_fn(move |req| -> Answering {
        // In flight from the call, before hyper polls anything else (a read it makes
        // meanwhile must not find the connection idle).
        let in_flight = conn.begin();
        Box::pin(super::reply::answer(
            app.clone(),
            addr,
            in_flight,
            &conf,
            req,
        ))
    })
}

/// A response body that keeps its request in flight until it ends (or is dropped). hyper
/// stops polling a body that says it has ended ([`Body::is_end_stream`]) and drops it: a
/// body dropped ended counts as written to its end.
#[derive(Debug)]
pub(super) struct Tracked {
    pub(super) body: axum::body::Body,
    pub(super) in_flight: Option<InFlight>,
    /// Whether neither the request nor the response asked to close the connection.
    pub(super) keep_alive: bool,
}

impl Tracked {
    /// The response was produced to its end: the request is no longer in flight.
    fn finish(&mut self) {
        if let Some(in_flight) = self.in_flight.take() {
            in_flight.finish(self.keep_alive);
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if self.body.is_end_stream() {
            self.finish();
        }
    }
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            this.finish();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A request body that fails with [`BodyReadTimeout`] when no bytes came for `timeout`
/// while they were waited for, and then sets `stalled` (and counts it, when it has a
/// listener's label).
#[derive(Debug)]
pub(super) struct TimedBody<B = Incoming> {
    inner: B,
    timeout: Duration,
    stalled: Arc<AtomicBool>,
    listener: Option<&'static str>,
    /// The connection told when the body ends.
    conn: Option<Arc<Conn>>,
    /// Made at the first wait; armed (reset) at the first wait after bytes came.
    sleep: Option<Pin<Box<Sleep>>>,
    armed: bool,
}

impl<B> TimedBody<B> {
    /// `inner`, failing after `timeout` without bytes; `stalled` is set then.
    pub(super) fn new(inner: B, timeout: Duration, stalled: Arc<AtomicBool>) -> Self {
        Self {
            inner,
            timeout,
            stalled,
            listener: None,
            conn: None,
            sleep: None,
            armed: false,
        }
    }

    /// This body, its stall counted in `idempotency_connection_timeouts_total` under
    /// `listener`.
    pub(super) fn counted_as(self, listener: &'static str) -> Self {
        let listener = Some(listener);
        Self { listener, ..self }
    }

    /// Starts the wait (if not started) and reports whether it is over.
    fn poll_wait(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !std::mem::replace(&mut self.armed, true) {
            let at = Instant::now() + self.timeout;
            match &mut self.sleep {
                Some(sleep) => sleep.as_mut().reset(at),
                None => self.sleep = Some(Box::pin(tokio::time::sleep_until(at))),
            }
        }
        match &mut self.sleep {
            Some(sleep) => sleep.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }
}

impl<B: Body> TimedBody<B> {
    /// This body, telling `conn` when it has been read to its end (at once when it is empty).
    pub(super) fn ending(self, conn: Arc<Conn>) -> Self {
        if self.inner.is_end_stream() {
            conn.body_ended();
        }
        let conn = Some(conn);
        Self { conn, ..self }
    }
}

impl<B> Body for TimedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.stalled.load(SeqCst) {
            return Poll::Ready(Some(Err(BodyReadTimeout.into())));
        }
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            this.armed = false;
            if frame.is_none() || this.inner.is_end_stream() {
                if let Some(conn) = &this.conn {
                    conn.body_ended();
                }
            }
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if this.poll_wait(cx).is_pending() {
            return Poll::Pending;
        }
        this.stalled.store(true, SeqCst);
        if let Some(listener) = this.listener {
            let labels = [("listener", listener), ("timeout", "body")];
            metrics::counter!(CONNECTION_TIMEOUTS.name, &labels).increment(1);
        }
        Poll::Ready(Some(Err(BodyReadTimeout.into())))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body stalled past `body_read_timeout`.
#[derive(Debug, Clone, Copy)]
pub struct BodyReadTimeout;

impl fmt::Display for BodyReadTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the request body stalled past body_read_timeout")
    }
}

impl StdError for BodyReadTimeout {}
