//! [`ResponseFuture`]: the response future of [`Idempotency`](crate::Idempotency).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::Response;
use http_body::Body;
use idemgate_core::BoxError;
use pin_project_lite::pin_project;
use tokio::time::Instant;

use crate::body::{boxed, BoxBody};
use crate::metrics::RouteMetrics;

pin_project! {
    /// The response future of [`Idempotency`](crate::Idempotency).
    ///
    /// A request whose method is not covered is the inner service's own future, polled in
    /// place (not boxed); a covered request's future is boxed, since admission awaits the
    /// body, the fingerprint and the detached task's answer.
    ///
    /// # Cancel safety
    /// Dropping it drops a pass-through call like any inner future. For a covered request,
    /// the work from the store's acquire on runs in its own task and is not cancelled: see
    /// [`Idempotency`](crate::Idempotency#cancel-safety).
    pub struct ResponseFuture<F, E> {
        #[pin]
        kind: Kind<F, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, E> {
        PassThrough {
            #[pin]
            future: F,
            meters: Arc<RouteMetrics>,
            started: Instant,
        },
        Covered {
            future: BoxFuture<'static, Result<Response<BoxBody>, E>>,
        },
    }
}

impl<F, E> ResponseFuture<F, E> {
    /// The inner service's future for an uncovered request, counted under `meters`.
    pub(crate) fn pass_through(future: F, meters: Arc<RouteMetrics>) -> Self {
        let started = Instant::now();
        let kind = Kind::PassThrough {
            future,
            meters,
            started,
        };
        Self { kind }
    }

    /// The future of a covered request.
    pub(crate) fn covered(future: BoxFuture<'static, Result<Response<BoxBody>, E>>) -> Self {
        let kind = Kind::Covered { future };
        Self { kind }
    }
}

impl<F, E> fmt::Debug for ResponseFuture<F, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            Kind::PassThrough { .. } => "pass-through",
            Kind::Covered { .. } => "covered",
        };
        f.debug_struct("ResponseFuture")
            .field("kind", &kind)
            .finish()
    }
}

impl<F, ResB, E> Future for ResponseFuture<F, E>
where
    F: Future<Output = Result<Response<ResB>, E>>,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    type Output = Result<Response<BoxBody>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::PassThrough {
                future,
                meters,
                started,
            } => {
                let called = ready!(future.poll(cx));
                meters.upstream(called.as_ref().ok().map(Response::status), *started);
                Poll::Ready(called.map(|r| r.map(boxed)))
            }
            KindProj::Covered { future } => future.as_mut().poll(cx),
        }
    }
}
