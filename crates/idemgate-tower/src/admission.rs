//! Admission of a covered request (steps 1 to 3 of [`Idempotency`](crate::Idempotency)):
//! its route, its key, its principal ([`crate::principal`]), its per-principal limits, its
//! body (buffered up to `max_body_bytes`) and its fingerprint ([`fingerprint`]); then the
//! hand-off to the detached task of [`crate::glue`].

use std::sync::Arc;

use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::{HeaderMap, Request, Response};
use http_body::Body;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use idemgate_core::fingerprint::CURRENT_VERSION;
use idemgate_core::key::parse_header_values_with;
use idemgate_core::lifecycle::Peek;
use idemgate_core::{BoxError, IdempotencyStore, Lifecycle, ScopedKey};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tower::Service;

use crate::access::Access;
use crate::body::{boxed, full, BoxBody};
use crate::glue::{answer_for, rejection, run, Answered, Covered};
use crate::lease::SendFailure;
use crate::limits::Limiter;
use crate::metrics::{Meters, RouteMetrics, UNMATCHED};
use crate::policy::{Policy, Resolved};
use crate::principal::Principal;
use crate::rejection::IdempotencyRejection;
use crate::replay::IDEMPOTENT_REPLAYED;
use crate::transaction::TxStore;

pub(crate) mod fingerprint;

use fingerprint::{ambiguous_header, FingerprintJob};

/// What a request shares with the service.
#[derive(Debug)]
pub(crate) struct Ctx<St> {
    pub(crate) lifecycle: Lifecycle<St>,
    pub(crate) policy: Arc<Policy>,
    pub(crate) tasks: TaskTracker,
    pub(crate) limiter: Arc<Limiter>,
    pub(crate) meters: Arc<Meters>,
    pub(crate) transactional: Option<TxStore>,
}

impl<St> Clone for Ctx<St> {
    fn clone(&self) -> Self {
        Self {
            lifecycle: self.lifecycle.clone(),
            policy: self.policy.clone(),
            tasks: self.tasks.clone(),
            limiter: self.limiter.clone(),
            meters: self.meters.clone(),
            transactional: self.transactional.clone(),
        }
    }
}

/// Steps 2 to 5 of a request whose method is covered, with the access log line and the
/// duration of covered requests.
pub(crate) async fn handle<S, St, B, ResB>(
    inner: S,
    ctx: Ctx<St>,
    req: Request<B>,
) -> Result<Response<BoxBody>, S::Error>
where
    S: Service<Request<BoxBody>, Response = Response<ResB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: SendFailure + Send + 'static,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    St: IdempotencyStore,
{
    let started = Instant::now();
    let (parts, body) = req.into_parts();
    let resolved = match ctx.policy.resolve_parts(&parts) {
        None => {
            let req = Request::from_parts(parts, body);
            return pass_through(inner, req, ctx.meters.uncovered()).await;
        }
        Some(Ok(resolved)) => resolved,
        Some(Err(refused)) => return refuse(&ctx, started, refused),
    };
    let meters = ctx.meters.route(&resolved.label);
    let mut access = Access::start(&meters, started);
    let answered = admit(inner, &ctx, resolved, &meters, &mut access, (parts, body)).await;
    access.finish(&answered);
    answered.1
}

/// The answer to a covered request refused before it reached a route (its path), counted
/// and logged under the `(unmatched)` label.
fn refuse<St, E>(
    ctx: &Ctx<St>,
    started: Instant,
    refused: IdempotencyRejection,
) -> Result<Response<BoxBody>, E> {
    let meters = ctx.meters.route(UNMATCHED);
    let access = Access::start(&meters, started);
    let (outcome, response) = rejection(&meters, &ctx.policy.problem_type_base, refused);
    let answered = (outcome, Ok(response));
    access.finish(&answered);
    answered.1
}

async fn admit<S, St, B, ResB>(
    inner: S,
    ctx: &Ctx<St>,
    mut resolved: Resolved<'_>,
    meters: &Arc<RouteMetrics>,
    access: &mut Access<'_>,
    (mut parts, body): (http::request::Parts, B),
) -> Answered<S::Error>
where
    S: Service<Request<BoxBody>, Response = Response<ResB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: SendFailure + Send + 'static,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    St: IdempotencyStore,
{
    let policy = &ctx.policy;
    let reject = |r| {
        let (outcome, response) = rejection(meters, &policy.problem_type_base, r);
        (outcome, Ok(response))
    };
    // Before the key: a request the upstream would run as another (method, path) is
    // refused keyed or not, or it could escape `key_required` too.
    if let Some(name) = policy.override_header(&parts.headers) {
        let header = name.as_str().to_owned();
        return reject(IdempotencyRejection::OverrideHeader { header });
    }
    if let Some(path) = resolved.forward.take() {
        match with_path(&parts.uri, &path) {
            Some(uri) => parts.uri = uri,
            None => return reject(IdempotencyRejection::Internal),
        }
    }
    let (min, max) = policy.key_len;
    let values = parts.headers.get_all(&policy.header_name);
    let key = match parse_header_values_with(values.iter().map(|v| v.as_bytes()), min, max) {
        Err(e) => return reject(IdempotencyRejection::InvalidKey(e)),
        Ok(None) if resolved.policy.key_required => {
            return reject(IdempotencyRejection::MissingKey {
                header: policy.header_name.to_string(),
            })
        }
        Ok(None) => {
            meters.count("bypassed");
            let req = Request::from_parts(parts, body);
            return ("bypassed", pass_through(inner, req, meters).await);
        }
        Ok(Some(key)) => key,
    };
    if let Some(header) = ambiguous_header(&parts.headers, resolved.policy) {
        return reject(IdempotencyRejection::AmbiguousRequest { header });
    }
    access.key(key.as_str());
    let rp = resolved.policy.clone();
    let principal = match rp.principal.principal(&parts) {
        Ok(Some(p)) => p,
        Ok(None) if rp.allow_anonymous => "anonymous".to_owned(),
        Ok(None) => return reject(IdempotencyRejection::MissingPrincipal),
        Err(refused) => return reject(refused),
    };
    access.principal(&principal);

    let ticket = match ctx.limiter.admit(&rp.limits, &resolved.label, &principal) {
        Ok(ticket) => ticket,
        Err(limited) => return reject(limited.into()),
    };
    let bytes = match read_body(&parts.headers, body, rp.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(r) => return reject(r),
    };
    let job = Arc::new(FingerprintJob {
        method: parts.method.clone(),
        uri: parts.uri.clone(),
        headers: parts.headers.clone(),
        route: resolved.route.to_string(),
        policy: rp.clone(),
        body: bytes.clone(),
        principal: principal.clone(),
    });
    let fingerprint = match job.clone().run(CURRENT_VERSION).await {
        Ok(f) => f,
        Err(r) => return reject(r),
    };
    parts.headers.remove(IDEMPOTENT_REPLAYED);
    let lifetime_route = rp.record_ttl_header.then(|| rp.clone());
    let mut covered = Covered {
        scope: ScopedKey {
            principal,
            route: resolved.route.into_owned(),
            key,
        },
        meters: meters.clone(),
        fingerprint,
        job,
        policy: policy.clone(),
        route: rp,
        ticket,
        transactional: ctx.transactional.clone(),
    };
    // A key its live record answers (a replay, 409, 422, ...) is answered here; only a key
    // to acquire starts the detached task, which then runs to its end whatever the client does.
    let acquire = match covered.peek(&ctx.lifecycle).await {
        Peek::Acquire(acquire) => acquire,
        Peek::Answer(answer) => {
            let (outcome, response) = answer_for(&mut covered, answer);
            let mut answer = Ok(response);
            if let Some(route) = &lifetime_route {
                crate::replay::add_key_lifetime(route, outcome, &mut answer);
            }
            return (outcome, answer);
        }
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let request = Request::from_parts(parts, full(bytes));
    let lifecycle = ctx.lifecycle.clone();
    // Boxed: the task's future (the whole lifecycle, several KiB) is then moved by pointer
    // into the task and its stages instead of being copied on each move.
    let task = run(inner, lifecycle, covered, acquire, request, tx);
    ctx.tasks.spawn(Box::pin(task));
    match rx.await {
        Ok((outcome, mut answer)) => {
            if let Some(route) = &lifetime_route {
                crate::replay::add_key_lifetime(route, outcome, &mut answer);
            }
            (outcome, answer)
        }
        Err(_) => reject(IdempotencyRejection::Internal),
    }
}

/// The request body, buffered up to `limit` bytes.
///
/// # Errors
/// [`IdempotencyRejection::BodyTooLarge`] past `limit` (by `Content-Length` before reading
/// anything, or while reading); [`IdempotencyRejection::BodyUnreadable`] when it broke off.
async fn read_body<B>(
    headers: &HeaderMap,
    body: B,
    limit: usize,
) -> Result<Bytes, IdempotencyRejection>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let too_large = IdempotencyRejection::BodyTooLarge { limit };
    if content_length(headers).is_some_and(|n| n > limit as u64) {
        return Err(too_large);
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(too_large),
        Err(_) => Err(IdempotencyRejection::BodyUnreadable),
    }
}

/// Forwards `req` untouched, counting the upstream's answer under `meters`.
pub(crate) async fn pass_through<S, B, ResB>(
    mut inner: S,
    req: Request<B>,
    meters: &RouteMetrics,
) -> Result<Response<BoxBody>, S::Error>
where
    S: Service<Request<BoxBody>, Response = Response<ResB>>,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let started = Instant::now();
    let called = inner.call(req.map(boxed)).await;
    meters.upstream(called.as_ref().ok().map(Response::status), started);
    Ok(called?.map(boxed))
}

/// `uri` with its path replaced by `path` (in normal form), its query kept.
fn with_path(uri: &http::Uri, path: &str) -> Option<http::Uri> {
    let path_and_query = match uri.query() {
        Some(query) => format!("{path}?{query}"),
        None => path.to_owned(),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(path_and_query.parse().ok()?);
    http::Uri::from_parts(parts).ok()
}

/// The `Content-Length` header as a number, if present and valid.
pub(crate) fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}
