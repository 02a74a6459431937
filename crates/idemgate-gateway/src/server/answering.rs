//! The gateway's service under its router: the idempotency layer over the proxy, with the
//! proxy's errors (the upstream unreachable, failed, too slow) answered as problems.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use idemgate_core::BoxError;
use idemgate_tower::body::BoxBody;

/// `inner` with its errors answered by [`upstream_error`] (`502`, or `504` after the
/// upstream timeout, as problem details): what axum's `HandleError` did, without boxing
/// each request's future. That box (1.9 KiB) was held by every request in flight for as
/// long as its upstream took.
#[derive(Clone, Debug)]
pub(super) struct Answering<S> {
    inner: S,
    /// `problem_type_base`, for the answers' problem types.
    type_base: Arc<str>,
    /// The error `inner` was not ready with, answered to the request that follows.
    unready: Option<Arc<BoxError>>,
}

impl<S> Answering<S> {
    pub(super) fn new(inner: S, type_base: &str) -> Self {
        Self {
            inner,
            type_base: type_base.into(),
            unready: None,
        }
    }
}

impl<S, B> tower::Service<Request<B>> for Answering<S>
where
    S: tower::Service<Request<B>, Response = Response<BoxBody>, Error = BoxError>,
{
    type Response = Response<BoxBody>;
    type Error = Infallible;
    type Future = Answer<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        match self.inner.poll_ready(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
            Poll::Ready(Err(e)) => {
                self.unready = Some(Arc::new(e));
                Poll::Ready(Ok(()))
            }
        }
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let type_base = self.type_base.clone();
        let state = match self.unready.take() {
            Some(e) => State::Unready { error: Some(e) },
            None => State::Called {
                future: self.inner.call(req),
            },
        };
        Answer { state, type_base }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`Answering`].
    pub(super) struct Answer<F> {
        #[pin]
        state: State<F>,
        type_base: Arc<str>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<F> {
        Called { #[pin] future: F },
        Unready { error: Option<Arc<BoxError>> },
    }
}

impl<F> Future for Answer<F>
where
    F: Future<Output = Result<Response<BoxBody>, BoxError>>,
{
    type Output = Result<Response<BoxBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let answer = match this.state.project() {
            StateProj::Called { future } => match std::task::ready!(future.poll(cx)) {
                Ok(response) => response,
                Err(e) => upstream_error(this.type_base, &e),
            },
            StateProj::Unready { error } => match error.take() {
                Some(e) => upstream_error(this.type_base, &e),
                None => panic!("`Answer` polled after it completed"),
            },
        };
        Poll::Ready(Ok(answer))
    }
}

/// The answer when the upstream could not be used: `502`, or `504` after the timeout.
fn upstream_error(type_base: &str, e: &BoxError) -> Response<BoxBody> {
    tracing::warn!(error = %e, "upstream request failed");
    crate::proxy::upstream_rejection(e).into_response(type_base)
}
