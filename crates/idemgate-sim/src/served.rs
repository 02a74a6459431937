//! The proxy path: the gateway's real proxy (`Proxy::with_connector` over
//! [`crate::wire::Connector`]) behind the layer, and the simulated upstream served over
//! each in-memory connection by hyper's HTTP/1.1 server, with the upstream's own logic
//! ([`crate::upstream::Upstream::serve`]) and the connection's faults: closed after
//! running, before any answer; the response head cut mid-way; the response body cut
//! mid-way.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use idemgate_core::BoxError;
use idemgate_gateway::proxy::{upstream_rejection, Proxy};
use idemgate_tower::body::{boxed, BoxBody};
use idemgate_tower::IdempotencyLayer;
use tokio::io::DuplexStream;
use tower::util::BoxCloneService;
use tower::{Layer, ServiceExt};

use crate::slot::SlotStore;
use crate::upstream::{Call, Svc};
use crate::wire::{Budget, Connector, CutIo, Ends};

/// In percent of answers: the connection closed after the operation ran, before any answer.
const CLOSED_AFTER_RUNNING: u64 = 5;
/// In percent of answers: the response head cut mid-way.
const HEAD_CUT: u64 = 5;
/// In percent of answers: the response body cut mid-way.
const BODY_CUT: u64 = 5;

/// The gateway's `max_response_headers` default.
const MAX_HEADERS: usize = 256;

/// The layer around the real proxy to the simulated upstream, answering upstream errors as
/// the gateway's router does (`502`, or `504` after `timeout`).
pub fn gateway(layer: &IdempotencyLayer<SlotStore>, ends: Arc<Ends>, timeout: Duration) -> Svc {
    let upstream: Uri = "http://upstream.sim".parse().expect("a valid URI");
    let proxy = Proxy::with_connector(&upstream, timeout, MAX_HEADERS, Connector(ends));
    let type_base: Arc<str> = idemgate_tower::Policy::default().problem_type_base.into();
    let inner = layer.layer(proxy);
    BoxCloneService::new(tower::service_fn(move |req: Request<BoxBody>| {
        let (inner, type_base) = (inner.clone(), type_base.clone());
        async move {
            let answer = inner.oneshot(req).await;
            Ok::<_, Infallible>(answer.unwrap_or_else(|e| upstream_error(&type_base, &e)))
        }
    }))
}

/// The gateway's answer when the upstream could not be used (as `server::upstream_error`).
fn upstream_error(type_base: &str, e: &BoxError) -> Response<BoxBody> {
    upstream_rejection(e).into_response(type_base)
}

/// Serves one connection's requests until it closes or breaks.
pub async fn connection(ends: Arc<Ends>, io: DuplexStream) {
    let budget: Budget = Arc::new(Mutex::new(None));
    let io = TokioIo::new(CutIo::new(io, budget.clone()));
    let svc = hyper::service::service_fn(move |req| answer(ends.clone(), budget.clone(), req));
    let _ = hyper::server::conn::http1::Builder::new()
        .auto_date_header(false)
        .serve_connection(io, svc)
        .await;
}

/// Runs the operation for one request, then answers, or breaks the connection.
async fn answer(
    ends: Arc<Ends>,
    budget: Budget,
    req: Request<Incoming>,
) -> Result<Response<BoxBody>, io::Error> {
    let call = Call::of(&req);
    let _ = req.into_body().collect().await;
    let out = ends
        .upstream
        .serve(&ends.cluster, &ends.rng, ends.instance, call)
        .await;
    ends.halt_if_dead().await;
    let (rng, cluster, i) = (&ends.rng, &ends.cluster, ends.instance);
    let ran = out.status() != http::StatusCode::SERVICE_UNAVAILABLE;
    let draw = rng.below(100);
    if draw < CLOSED_AFTER_RUNNING && ran {
        cluster.fault("upstream closes the connection after running");
        cluster.trace(format!("i{i} upstream closes the connection unanswered"));
        return Err(io::Error::other("closed before answering"));
    }
    if (CLOSED_AFTER_RUNNING..CLOSED_AFTER_RUNNING + HEAD_CUT).contains(&draw) {
        // The status line alone is over 20 bytes: the cut is in the head.
        let keep = rng.range(0, 20) as usize;
        cluster.fault("upstream response head cut");
        cluster.trace(format!("i{i} upstream head cut after {keep} bytes"));
        *budget.lock().unwrap_or_else(PoisonError::into_inner) = Some(keep);
        return Ok(out);
    }
    if draw >= 100 - BODY_CUT {
        return Ok(cut_body(&ends, out).await);
    }
    Ok(out)
}

/// `out` with its body cut after a seeded number of bytes, fewer than it has.
async fn cut_body(ends: &Ends, out: Response<BoxBody>) -> Response<BoxBody> {
    let (mut parts, body) = out.into_parts();
    let whole = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let keep = ends.rng.below(whole.len() as u64) as usize;
    ends.cluster.fault("upstream response body cut");
    let i = ends.instance;
    let len = whole.len();
    ends.cluster.trace(format!(
        "i{i} upstream body cut after {keep} of {len} bytes"
    ));
    parts
        .headers
        .insert(http::header::CONTENT_LENGTH, len.into());
    let cut = CutBody {
        prefix: Some(whole.slice(..keep)),
        len: len as u64,
        pause: None,
    };
    Response::from_parts(parts, boxed(cut))
}

/// A body that sends its prefix, pauses (so hyper writes it out), then breaks.
struct CutBody {
    prefix: Option<Bytes>,
    len: u64,
    pause: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Body for CutBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        if let Some(prefix) = this.prefix.take().filter(|p| !p.is_empty()) {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        let pause = this
            .pause
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(Duration::from_millis(1))));
        std::task::ready!(pause.as_mut().poll(cx));
        Poll::Ready(Some(Err(io::Error::other("body cut"))))
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len)
    }
}
