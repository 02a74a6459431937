//! [`Idempotency`]: the middleware service, and admission of covered requests.

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::{Request, Response};
use http_body::Body;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use idemgate_core::fingerprint::CURRENT_VERSION;
use idemgate_core::key::parse_header_values_with;
use idemgate_core::{BoxError, IdempotencyStore, Lifecycle, ScopedKey};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tower::Service;

use crate::access::Access;
use crate::admission::{content_length, principal_of};
use crate::body::{boxed, full, BoxBody};
use crate::execute::{rejection, run, Answered, Covered};
use crate::fingerprint::FingerprintJob;
use crate::headers::{IDEMPOTENT_REPLAYED, IDEMPOTENT_TAKEOVER};
use crate::limits::Limiter;
use crate::metrics::{Meters, RouteMetrics};
use crate::policy::{Policy, Resolved};
use crate::rejection::IdempotencyRejection;

/// The idempotency middleware. For each request:
///
/// 1. A method that is not covered passes through untouched.
/// 2. The key header is parsed (`400` if malformed); without one, the request passes through,
///    or gets `400` if the route requires a key.
/// 3. The principal is read (`401` without one or with an invalid token, `400` if
///    ambiguous), its per-principal limits of the route are checked (`429`, see
///    [`crate::limits`]), the body is buffered up to `max_body_bytes` (`413` above), and the
///    fingerprint is computed: inline for small identity bodies, on the blocking pool (one
///    job per CPU) for large or encoded ones; an encoded body that decodes past the route's
///    decoded-body limit gets `413`.
/// 4. The core lifecycle ([`idemgate_core::lifecycle`]) acquires (principal, route, key) and
///    decides. A live record is answered from: replay, `409` in flight, `422` mismatch,
///    `500` failed, `500` outcome unknown (a lapsed lease), `500` record corrupt, `410` not
///    kept. A store failure or timeout is `503` (or an unrecorded forward on `fail_open`
///    routes).
/// 5. The request is forwarded (with `Idempotent-Takeover: true` after a takeover) while
///    the lease is renewed every third of its TTL; the response is stored, or the record
///    released or failed by the route's status rules. The outcome write is retried until it
///    lands; the client gets its response once the write landed or the store deadline
///    passed, whichever comes first.
///
/// # Cancel safety
/// From step 4 on, the work runs in its own task: a client that disconnects drops only the
/// response future, while the acquire, the forwarded operation and the write of its outcome
/// run to the end. Otherwise a retry would find the key released, or in progress forever,
/// and could run the operation twice.
#[derive(Debug)]
pub struct Idempotency<S, St> {
    inner: S,
    lifecycle: Lifecycle<St>,
    policy: Arc<Policy>,
    tasks: TaskTracker,
    limiter: Arc<Limiter>,
    meters: Arc<Meters>,
}

impl<S: Clone, St> Clone for Idempotency<S, St> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            lifecycle: self.lifecycle.clone(),
            policy: self.policy.clone(),
            tasks: self.tasks.clone(),
            limiter: self.limiter.clone(),
            meters: self.meters.clone(),
        }
    }
}

impl<S, St: IdempotencyStore> Idempotency<S, St> {
    /// Wraps `inner`.
    pub fn new(inner: S, store: Arc<St>, policy: Arc<Policy>) -> Self {
        let lifecycle = Lifecycle::new(store, policy.lifecycle.clone());
        Self::with_lifecycle(inner, lifecycle, policy, TaskTracker::new())
    }
}

impl<S, St> Idempotency<S, St> {
    /// Wraps `inner` around `lifecycle`, spawning detached work on `tasks` (see
    /// [`crate::IdempotencyLayer::detached_tasks`]).
    pub fn with_lifecycle(
        inner: S,
        lifecycle: Lifecycle<St>,
        policy: Arc<Policy>,
        tasks: TaskTracker,
    ) -> Self {
        Self {
            inner,
            lifecycle,
            meters: Arc::new(Meters::for_policy(&policy)),
            policy,
            tasks,
            limiter: Arc::default(),
        }
    }

    /// Shares `limiter` (the per-principal limits' state) with the layer's other services.
    pub(crate) fn sharing_limits(mut self, limiter: Arc<Limiter>) -> Self {
        self.limiter = limiter;
        self
    }

    /// The detached tasks of this service: await them before shutting the runtime down.
    pub fn detached_tasks(&self) -> &TaskTracker {
        &self.tasks
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The store.
    pub fn store(&self) -> &Arc<St> {
        self.lifecycle.store()
    }
}

impl<S, St, B, ResB> Service<Request<B>> for Idempotency<S, St>
where
    S: Service<Request<BoxBody>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    St: IdempotencyStore,
{
    type Response = Response<BoxBody>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // `self.inner` was driven to readiness; a clone may not be. Keep the ready one for
        // this call and leave the clone for the next poll_ready.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let ctx = Ctx {
            lifecycle: self.lifecycle.clone(),
            policy: self.policy.clone(),
            tasks: self.tasks.clone(),
            limiter: self.limiter.clone(),
            meters: self.meters.clone(),
        };
        Box::pin(handle(inner, ctx, req))
    }
}

/// What a request shares with the service.
struct Ctx<St> {
    lifecycle: Lifecycle<St>,
    policy: Arc<Policy>,
    tasks: TaskTracker,
    limiter: Arc<Limiter>,
    meters: Arc<Meters>,
}

/// Steps 1 to 5 of [`Idempotency`], with the access log line and the duration of covered
/// requests.
async fn handle<S, St, B, ResB>(
    inner: S,
    ctx: Ctx<St>,
    mut req: Request<B>,
) -> Result<Response<BoxBody>, S::Error>
where
    S: Service<Request<BoxBody>, Response = Response<ResB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    St: IdempotencyStore,
{
    let started = Instant::now();
    // Reserved: only idemgate says a request is a takeover; never trusted from clients.
    req.headers_mut().remove(IDEMPOTENT_TAKEOVER);
    let Some(resolved) = ctx.policy.resolve(req.method(), req.uri().path()) else {
        return pass_through(inner, req, ctx.meters.uncovered()).await;
    };
    let meters = ctx.meters.route(resolved.label).clone();
    let mut access = Access::start(&meters, started);
    let answered = admit(inner, &ctx, resolved, &meters, &mut access, req).await;
    access.finish(&answered);
    answered.1
}

async fn admit<S, St, B, ResB>(
    inner: S,
    ctx: &Ctx<St>,
    resolved: Resolved<'_>,
    meters: &Arc<RouteMetrics>,
    access: &mut Access<'_>,
    req: Request<B>,
) -> Answered<S::Error>
where
    S: Service<Request<BoxBody>, Response = Response<ResB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
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
    let (min, max) = policy.key_len;
    let values = req.headers().get_all(&policy.header_name);
    let key = match parse_header_values_with(values.iter().map(|v| v.as_bytes()), min, max) {
        Err(e) => return reject(IdempotencyRejection::InvalidKey(e)),
        Ok(None) if resolved.policy.key_required => {
            return reject(IdempotencyRejection::MissingKey {
                header: policy.header_name.to_string(),
            })
        }
        Ok(None) => {
            meters.count("bypassed");
            return ("bypassed", pass_through(inner, req, meters).await);
        }
        Ok(Some(key)) => key,
    };
    access.key(key.as_str());
    let rp = resolved.policy.clone();
    let principal = match principal_of(req.headers(), &rp.principal) {
        Ok(Some(p)) => p,
        Ok(None) if rp.allow_anonymous => "anonymous".to_owned(),
        Ok(None) => return reject(IdempotencyRejection::MissingPrincipal),
        Err(refused) => return reject(refused),
    };
    access.principal(&principal);

    let ticket = match ctx.limiter.admit(&rp.limits, resolved.label, &principal) {
        Ok(ticket) => ticket,
        Err(limited) => return reject(limited.into()),
    };
    let (mut parts, body) = req.into_parts();
    let too_large = IdempotencyRejection::BodyTooLarge {
        limit: rp.max_body_bytes,
    };
    if content_length(&parts.headers).is_some_and(|n| n > rp.max_body_bytes as u64) {
        return reject(too_large);
    }
    let bytes = match Limited::new(body, rp.max_body_bytes).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<LengthLimitError>() => return reject(too_large),
        Err(_) => return reject(IdempotencyRejection::BodyUnreadable),
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
    let lifetime_route = rp.clone();
    let covered = Covered {
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
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let request = Request::from_parts(parts, full(bytes));
    let lifecycle = ctx.lifecycle.clone();
    ctx.tasks.spawn(run(inner, lifecycle, covered, request, tx));
    match rx.await {
        Ok((outcome, mut answer)) => {
            crate::headers::add_key_lifetime(&lifetime_route, outcome, &mut answer);
            (outcome, answer)
        }
        Err(_) => reject(IdempotencyRejection::Internal),
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
