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
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tower::Service;

use crate::access::Access;
use crate::body::{boxed, full, BoxBody};
use crate::glue::{answer_for, rejection, run, Answered, Covered};
use crate::lease::SendFailure;
use crate::limits::Limiter;
use crate::metrics::{Meters, RouteMetrics, UNMATCHED};
use crate::policy::{Policy, Resolved, RoutePolicy};
use crate::principal::Principal;
use crate::rejection::IdempotencyRejection;
use crate::replay::IDEMPOTENT_REPLAYED;
use crate::transaction::TxStore;

pub(crate) mod fingerprint;

use fingerprint::{ambiguous_header, FingerprintJob};

/// What the services of one layer share, and so every request they take.
#[derive(Debug)]
pub(crate) struct Ctx<St> {
    pub(crate) lifecycle: Lifecycle<St>,
    pub(crate) policy: Arc<Policy>,
    pub(crate) tasks: TaskTracker,
    pub(crate) limiter: Arc<Limiter>,
    /// The store for completions inside a handler's transaction
    /// (`IdempotencyLayer::with_transactions`, features `axum` and `postgres`).
    pub(crate) transactional: Option<TxStore>,
}

impl<St> Clone for Ctx<St> {
    fn clone(&self) -> Self {
        Self {
            lifecycle: self.lifecycle.clone(),
            policy: self.policy.clone(),
            tasks: self.tasks.clone(),
            limiter: self.limiter.clone(),
            transactional: self.transactional.clone(),
        }
    }
}

/// Steps 2 to 5 of a request whose method is covered, with the access log line and the
/// duration of covered requests, counted under the service's `meters`.
pub(crate) async fn handle<S, St, B, ResB>(
    inner: S,
    ctx: Ctx<St>,
    meters: Arc<Meters>,
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
    let Some(resolved) = ctx.policy.resolve_parts(&parts) else {
        let req = Request::from_parts(parts, body);
        return pass_through(inner, req, meters.uncovered()).await;
    };
    // A request refused before it reached a route (its path) counts under `(unmatched)`.
    let meters = meters.route(resolved.as_ref().map_or(UNMATCHED, |r| &r.label));
    let mut access = Access::start(&meters, started);
    let admitted = match resolved {
        // Boxed: admission's state (the body, the fingerprint, the store's read: about
        // 5 KiB) is let go before the wait for the detached task, which lasts as long as
        // the upstream takes; the wait itself holds little more than the reply's receiver.
        Ok(resolved) => {
            let parts = (parts, body);
            Box::pin(admit(inner, &ctx, resolved, &meters, &mut access, parts)).await
        }
        Err(refused) => Err(refused),
    };
    let admitted = match admitted {
        Ok(Admitted::Answered(answered)) => Ok(answered),
        Ok(Admitted::Running(reply, lifetime)) => match reply.await {
            Ok(answered) => Ok(with_lifetime(lifetime.as_ref(), answered)),
            Err(_) => Err(IdempotencyRejection::Internal),
        },
        Err(refused) => Err(refused),
    };
    let answered = admitted.unwrap_or_else(|refused| {
        let (outcome, response) = rejection(&meters, &ctx.policy.problem_type_base, refused);
        (outcome, Ok(response))
    });
    access.finish(&answered);
    answered.1
}

/// How an admitted request is answered.
enum Admitted<E> {
    /// At once: a replay, a rejection by its record, a request without a key.
    Answered(Answered<E>),
    /// By the detached task that runs it, through this receiver; with the route when its
    /// answers carry the key's lifetime.
    Running(oneshot::Receiver<Answered<E>>, Option<Arc<RoutePolicy>>),
}

/// `answered`, with the key's lifetime when `route` sends it.
fn with_lifetime<E>(route: Option<&Arc<RoutePolicy>>, mut answered: Answered<E>) -> Answered<E> {
    if let Some(route) = route {
        crate::replay::add_key_lifetime(route, answered.0, &mut answered.1);
    }
    answered
}

/// Steps 2 and 3 of a request on its route, then [`respond`]; or the refusal of the request.
async fn admit<S, St, B, ResB>(
    inner: S,
    ctx: &Ctx<St>,
    mut resolved: Resolved<'_>,
    meters: &Arc<RouteMetrics>,
    access: &mut Access<'_>,
    (mut parts, body): (http::request::Parts, B),
) -> Result<Admitted<S::Error>, IdempotencyRejection>
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
    // Before the key: a request the upstream would run as another (method, path) is
    // refused keyed or not, or it could escape `key_required` too.
    if let Some(name) = policy.override_header(&parts.headers) {
        let header = name.as_str().to_owned();
        return Err(IdempotencyRejection::OverrideHeader { header });
    }
    if let Some(path) = resolved.forward.take() {
        parts.uri = with_path(&parts.uri, &path).ok_or(IdempotencyRejection::Internal)?;
    }
    let (min, max) = policy.key_len;
    let values = parts.headers.get_all(&policy.header_name).iter();
    let key = parse_header_values_with(values.map(|v| v.as_bytes()), min, max);
    let key = match key.map_err(IdempotencyRejection::InvalidKey)? {
        Some(key) => key,
        None if resolved.policy.key_required => {
            let header = policy.header_name.to_string();
            return Err(IdempotencyRejection::MissingKey { header });
        }
        None => {
            meters.count("bypassed");
            let req = Request::from_parts(parts, body);
            let answered = ("bypassed", pass_through(inner, req, meters).await);
            return Ok(Admitted::Answered(answered));
        }
    };
    if let Some(header) = ambiguous_header(&parts.headers, resolved.policy) {
        return Err(IdempotencyRejection::AmbiguousRequest { header });
    }
    access.key(key.as_str());
    let rp = resolved.policy.clone();
    let principal = match rp.principal.principal(&parts)? {
        Some(p) => p,
        None if rp.allow_anonymous => "anonymous".to_owned(),
        None => return Err(IdempotencyRejection::MissingPrincipal),
    };
    access.principal(&principal);
    let ticket = ctx.limiter.admit(&rp.limits, &resolved.label, &principal)?;
    let bytes = read_body(&parts.headers, body, rp.max_body_bytes).await?;
    let job = Arc::new(FingerprintJob {
        method: parts.method.clone(),
        uri: parts.uri.clone(),
        headers: parts.headers.clone(),
        route: resolved.route.to_string(),
        policy: rp.clone(),
        body: bytes.clone(),
        principal: principal.clone(),
    });
    let fingerprint = job.clone().run(CURRENT_VERSION).await?;
    parts.headers.remove(IDEMPOTENT_REPLAYED);
    let covered = Covered {
        scope: ScopedKey {
            principal,
            route: resolved.route.into_owned(),
            key,
        },
        meters: meters.clone(),
        fingerprint,
        job: Some(job),
        policy: policy.clone(),
        route: rp,
        ticket,
        transactional: ctx.transactional.clone(),
    };
    respond(inner, ctx, covered, Request::from_parts(parts, full(bytes))).await
}

/// Steps 4 and 5: a key its live record answers (a replay, 409, 422, ...) is answered
/// here; only a key to acquire starts the detached task, which then runs to its end
/// whatever the client does, and answers through the receiver returned. With the key's
/// lifetime on routes that send it.
async fn respond<S, St, ResB>(
    inner: S,
    ctx: &Ctx<St>,
    mut covered: Covered,
    request: Request<BoxBody>,
) -> Result<Admitted<S::Error>, IdempotencyRejection>
where
    S: Service<Request<BoxBody>, Response = Response<ResB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: SendFailure + Send + 'static,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
    St: IdempotencyStore,
{
    let route = &covered.route;
    let lifetime = route.record_ttl_header.then(|| route.clone());
    Ok(match covered.peek(&ctx.lifecycle).await {
        Peek::Acquire(acquire) => {
            let (tx, rx) = oneshot::channel();
            let lifecycle = ctx.lifecycle.clone();
            // Boxed: the task's future (the whole lifecycle, several KiB) is then moved by
            // pointer into the task instead of being copied on each move. The request too:
            // the task and its stages each keep room for what they were given, until the
            // upstream answered.
            let task = run(inner, lifecycle, covered, acquire, Box::new(request), tx);
            ctx.tasks.spawn(Box::pin(task));
            Admitted::Running(rx, lifetime)
        }
        Peek::Answer(answer) => {
            let (outcome, response) = answer_for(&mut covered, answer);
            Admitted::Answered(with_lifetime(lifetime.as_ref(), (outcome, Ok(response))))
        }
    })
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
    let value = headers.get(CONTENT_LENGTH)?.to_str().ok()?;
    value.trim().parse().ok()
}
