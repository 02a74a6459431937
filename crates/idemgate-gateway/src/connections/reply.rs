//! Each request's answer: the listener's [`App`] called with the request (its client
//! address given as axum's `ConnectInfo`, as `axum::serve` did), and its response finished
//! as a server's top level finishes it ([`top_level`]), or replaced by `408` when the
//! request's body stalled.
//!
//! The answer is a future of its own ([`Reply`]) rather than an `async fn`: a request holds
//! it for as long as its service takes (the gateway's upstream), and an `async fn` would keep
//! room for its arguments and the request it built beside the service's future.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{ready, Context, Poll, Waker};

use axum::body::Body;
use axum::extract::ConnectInfo;
use http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderValue, Method, Request, Response, Version};
use hyper::body::{Body as _, Incoming};

use super::answer::Answers;
use super::conn::InFlight;
use super::request::{TimedBody, Tracked};
use super::{App, Listening};

#[cfg(test)]
mod tests;

/// `req` (from `addr`, in flight as `in_flight`) answered by `app` under `conf`.
///
/// `app` is called at once when it is ready at once (always, for axum's router and the
/// gateway's service); otherwise the future waits for it with the request boxed.
pub(super) fn answer<S: App>(
    mut app: S,
    addr: SocketAddr,
    in_flight: InFlight,
    conf: &Listening,
    req: Request<Incoming>,
) -> Reply<S> {
    let stalled = Arc::new(AtomicBool::new(false));
    let h1 = req.version() < Version::HTTP_2;
    let keep_alive = h1 && keeps_alive(req.version(), req.headers());
    let (mut parts, body) = req.into_parts();
    let method = Asked::of(&parts.method);
    parts.extensions.insert(ConnectInfo(addr));
    let timeout = conf.limits.body_read_timeout;
    let body = TimedBody::new(body, timeout, stalled.clone())
        .counted_as(conf.name)
        .ending(in_flight.conn());
    let req = Request::from_parts(parts, Body::new(body));
    let stage = match app.poll_ready(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(Ok(())) => Stage::Called {
            future: app.call(req),
        },
        Poll::Ready(Err(never)) => match never {},
        Poll::Pending => Stage::Waiting {
            pending: Some(Box::new((app, req))),
        },
    };
    let finish = Finish {
        stalled,
        answers: conf.answers.clone(),
        in_flight: Some(in_flight),
        keep_alive,
        h1,
        method,
    };
    Reply { stage, finish }
}

pin_project_lite::pin_project! {
    /// The future of [`answer`].
    pub(super) struct Reply<S: App> {
        #[pin]
        stage: Stage<S>,
        finish: Finish,
    }
}

pin_project_lite::pin_project! {
    #[project = StageProj]
    enum Stage<S: App> {
        /// The service was not ready when the request came: both wait, boxed.
        Waiting { pending: Option<Box<(S, Request<Body>)>> },
        /// The service has the request.
        Called { #[pin] future: S::Future },
    }
}

/// What makes the service's response the answer.
struct Finish {
    /// Set when the request's body stalled ([`TimedBody`]).
    stalled: Arc<AtomicBool>,
    answers: Arc<Answers>,
    /// Taken by the answer.
    in_flight: Option<InFlight>,
    /// Whether the request lets the connection be kept alive.
    keep_alive: bool,
    h1: bool,
    method: Asked,
}

impl<S: App> Future for Reply<S> {
    type Output = Result<Response<Tracked>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let pending = match this.stage.as_mut().project() {
                StageProj::Called { future } => {
                    let response = ready!(future.poll(cx))?;
                    return Poll::Ready(Ok(this.finish.answer(response)));
                }
                StageProj::Waiting { pending } => pending,
            };
            let Some(waiting) = pending else {
                panic!("`Reply` polled after it completed");
            };
            ready!(waiting.0.poll_ready(cx))?;
            if let Some(waiting) = pending.take() {
                let (mut app, req) = *waiting;
                let future = app.call(req);
                this.stage.set(Stage::Called { future });
            }
        }
    }
}

impl Finish {
    /// `response`, or `408` when the request's body stalled, as a [`Tracked`] answer.
    fn answer<B>(&mut self, response: Response<B>) -> Response<Tracked>
    where
        B: hyper::body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<idemgate_core::BoxError>,
    {
        let response = if self.stalled.load(SeqCst) {
            self.answers.body_timeout(self.h1)
        } else {
            top_level(response.map(Body::new), self.method)
        };
        let keep_alive = self.keep_alive && !has_close(response.headers());
        let in_flight = self.in_flight.take();
        response.map(|body| Tracked {
            body,
            in_flight,
            keep_alive,
        })
    }
}

/// The request methods whose responses [`top_level`] treats apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Asked {
    Head,
    Connect,
    Other,
}

impl Asked {
    fn of(method: &Method) -> Self {
        match *method {
            Method::HEAD => Self::Head,
            Method::CONNECT => Self::Connect,
            _ => Self::Other,
        }
    }
}

/// `response` as a server sends it (what axum's router did at its top level, and what it
/// got wrong for a proxy's answers):
/// - to a `CONNECT`, a successful response has no body and no `Content-Length` or
///   `Transfer-Encoding` (RFC 9110 section 9.3.6): they are dropped (hyper sent nothing at
///   all for one that kept its `Content-Length`);
/// - to a `HEAD`, the body is dropped and its headers kept (RFC 9110 section 9.3.2); a
///   `Content-Length` is never made up from the body, which for an upstream's answer to
///   `HEAD` is empty whatever the resource's size;
/// - otherwise a body of exact size gets its `Content-Length` when it has none.
pub(super) fn top_level(mut response: Response<Body>, method: Asked) -> Response<Body> {
    match method {
        Asked::Connect if response.status().is_success() => {
            let headers = response.headers_mut();
            let framed = headers.remove(CONTENT_LENGTH).is_some();
            let framed = headers.remove(TRANSFER_ENCODING).is_some() || framed;
            if framed || response.body().size_hint().lower() != 0 {
                tracing::warn!("a successful answer to CONNECT had a body; sent without it");
            }
            *response.body_mut() = Body::empty();
        }
        Asked::Head => *response.body_mut() = Body::empty(),
        Asked::Connect | Asked::Other => {
            if !response.headers().contains_key(CONTENT_LENGTH) {
                if let Some(size) = response.body().size_hint().exact() {
                    let length = HeaderValue::from(size);
                    response.headers_mut().insert(CONTENT_LENGTH, length);
                }
            }
        }
    }
    response
}

/// Whether an HTTP/1 request keeps its connection open after its response (RFC 9112
/// section 9.3: HTTP/1.1 unless `Connection: close`, HTTP/1.0 only with `keep-alive`).
fn keeps_alive(version: Version, headers: &HeaderMap) -> bool {
    match version {
        Version::HTTP_11 => !has_close(headers),
        _ => has_token(headers, "keep-alive") && !has_close(headers),
    }
}

/// Whether `Connection` lists `close`.
fn has_close(headers: &HeaderMap) -> bool {
    has_token(headers, "close")
}

/// Whether a `Connection` field lists `token` (case-insensitively, RFC 9110 section 7.6.1).
fn has_token(headers: &HeaderMap, token: &str) -> bool {
    headers.get_all(CONNECTION).iter().any(|v| {
        v.to_str().map_or(true, |v| {
            v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token))
        })
    })
}
