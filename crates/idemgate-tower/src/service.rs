//! [`Idempotency`]: the middleware service.

use std::any::Any;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::header::{AUTHORIZATION, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, Request, Response};
use http_body::Body;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use idemgate_core::fingerprint::{
    Fingerprint, FingerprintInput, FingerprintOptions, CURRENT_VERSION,
};
use idemgate_core::key::parse_header_values_with;
use idemgate_core::{
    decide, AcquireOutcome, AcquireRequest, BoxError, Decision, IdempotencyStore, Lease,
    LeaseToken, ScopedKey, StoreError, StoredResponse,
};
use sha2::{Digest, Sha256};
use tokio_util::task::TaskTracker;
use tower::Service;

use crate::body::{boxed, buffer_up_to, chain, full, BoxBody, Buffered};
use crate::headers::{headers_to_store, replay, IDEMPOTENT_REPLAYED};
use crate::policy::{Policy, PrincipalSource, RoutePolicy, StatusAction};
use crate::rejection::IdempotencyRejection;

/// An error of the inner service that means the request never reached the operation (for
/// example a refused connection): the record is released so the same key can be retried.
/// Any other inner error fails the record, because the operation may have run.
///
/// Return it (or an error whose `source()` chain holds it, boxed as [`BoxError`]) from the
/// inner service.
#[derive(Debug, thiserror::Error)]
#[error("the request was not sent: {0}")]
pub struct NotSent(#[source] pub BoxError);

/// The lease under which the inner service runs, in its request's extensions.
///
/// A service that completes the record itself, in the same database transaction as its
/// business rows (`PostgresStore::complete_using` in `idemgate-postgres`), calls
/// [`LeaseHandle::mark_completed`] after its commit; the middleware then writes no outcome of
/// its own. With axum, take it as `Extension<LeaseHandle>`.
#[derive(Clone, Debug)]
pub struct LeaseHandle(Arc<LeaseState>);

#[derive(Debug)]
struct LeaseState {
    lease: Lease,
    completed: std::sync::atomic::AtomicBool,
}

impl LeaseHandle {
    fn new(lease: Lease) -> Self {
        Self(Arc::new(LeaseState {
            lease,
            completed: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// The lease: pass it to the store's `complete_using`.
    pub fn lease(&self) -> &Lease {
        &self.0.lease
    }

    /// Says the record was completed by the service itself (call it after the commit).
    pub fn mark_completed(&self) {
        self.0
            .completed
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// True once [`LeaseHandle::mark_completed`] was called.
    pub fn is_completed(&self) -> bool {
        self.0.completed.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The idempotency middleware. For each request:
///
/// 1. A method that is not covered passes through untouched.
/// 2. The key header is parsed (`400` if malformed); without one, the request passes through,
///    or gets `400` if the route requires a key.
/// 3. The principal is read (`401` without one), the body is buffered up to
///    `max_body_bytes` (`413` above), and the fingerprint is computed.
/// 4. The store is asked to acquire (principal, route, key). A live record is answered from:
///    replay, `409` in flight, `422` mismatch, `500` failed, `410` not kept. A store failure
///    is `503` (or an unrecorded forward on `fail_open` routes).
/// 5. The request is forwarded while the lease is renewed every third of its TTL; the
///    response is stored, or the record released or failed by the route's status rules.
///
/// # Cancel safety
/// From step 4 on, the work runs in its own task: a client that disconnects drops only the
/// response future, while the acquire, the forwarded operation and the write of its outcome
/// run to the end. Otherwise a retry would find the key released, or in progress forever,
/// and could run the operation twice.
#[derive(Debug)]
pub struct Idempotency<S, St> {
    inner: S,
    store: Arc<St>,
    policy: Arc<Policy>,
    tasks: TaskTracker,
}

impl<S: Clone, St> Clone for Idempotency<S, St> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            store: self.store.clone(),
            policy: self.policy.clone(),
            tasks: self.tasks.clone(),
        }
    }
}

impl<S, St> Idempotency<S, St> {
    /// Wraps `inner`.
    pub fn new(inner: S, store: Arc<St>, policy: Arc<Policy>) -> Self {
        Self::with_tasks(inner, store, policy, TaskTracker::new())
    }

    /// Wraps `inner`, spawning detached work on `tasks` (see
    /// [`crate::IdempotencyLayer::detached_tasks`]).
    pub fn with_tasks(inner: S, store: Arc<St>, policy: Arc<Policy>, tasks: TaskTracker) -> Self {
        Self {
            inner,
            store,
            policy,
            tasks,
        }
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
        &self.store
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
        Box::pin(handle(
            inner,
            self.store.clone(),
            self.policy.clone(),
            self.tasks.clone(),
            req,
        ))
    }
}

/// Everything about a covered request that the detached task needs.
struct Covered {
    scope: ScopedKey,
    label: String,
    fingerprint: Fingerprint,
    /// The request body, to fingerprint it again for a record of another algorithm version.
    body: Bytes,
    policy: Arc<Policy>,
    route: Arc<RoutePolicy>,
}

async fn handle<S, St, B, ResB>(
    inner: S,
    store: Arc<St>,
    policy: Arc<Policy>,
    tasks: TaskTracker,
    req: Request<B>,
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
    let Some(resolved) = policy.resolve(req.method(), req.uri().path()) else {
        return pass_through(inner, req).await;
    };
    let label = resolved.label;
    let reject = |r| Ok(rejection(label, &policy.problem_type_base, r));
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
            count(label, "bypassed");
            return pass_through(inner, req).await;
        }
        Ok(Some(key)) => key,
    };
    let rp = resolved.policy.clone();
    let principal = match principal_of(req.headers(), &rp.principal) {
        Some(p) => p,
        None if rp.allow_anonymous => "anonymous".to_owned(),
        None => return reject(IdempotencyRejection::MissingPrincipal),
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
    let request_parts = (&parts.method, &parts.uri, &parts.headers);
    let Some(fingerprint) =
        fingerprint_of(request_parts, &resolved.route, &rp, &bytes, CURRENT_VERSION)
    else {
        return reject(IdempotencyRejection::Internal);
    };
    parts.headers.remove(IDEMPOTENT_REPLAYED);
    let covered = Covered {
        scope: ScopedKey {
            principal,
            route: resolved.route.into_owned(),
            key,
        },
        label: label.to_owned(),
        fingerprint,
        body: bytes.clone(),
        policy: policy.clone(),
        route: rp,
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let request = Request::from_parts(parts, full(bytes));
    tasks.spawn(async move {
        let result = run(inner, store, covered, request).await;
        let _ = tx.send(result);
    });
    match rx.await {
        Ok(result) => result,
        Err(_) => reject(IdempotencyRejection::Internal),
    }
}

/// Steps 4 and 5, in the detached task.
async fn run<S, St, ResB>(
    inner: S,
    store: Arc<St>,
    covered: Covered,
    request: Request<BoxBody>,
) -> Result<Response<BoxBody>, S::Error>
where
    S: Service<Request<BoxBody>, Response = Response<ResB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
    St: IdempotencyStore,
{
    let rp = &covered.route;
    let reject = |r| {
        Ok(rejection(
            &covered.label,
            &covered.policy.problem_type_base,
            r,
        ))
    };
    let mut acquire = AcquireRequest {
        key: covered.scope.clone(),
        fingerprint: covered.fingerprint,
        token: LeaseToken::random(),
        lease_ttl: rp.lease_ttl,
        record_ttl: rp.record_ttl,
        policy: rp.decision_policy(),
    };
    // A record can change between the store's read and our decision (released, expired);
    // then the decision says "run" and we try again.
    for _ in 0..3 {
        let started = tokio::time::Instant::now();
        let outcome = store.acquire(&acquire).await;
        metrics::histogram!("idempotency_store_duration_seconds", "op" => "acquire", "backend" => store.backend())
            .record(started.elapsed().as_secs_f64());
        let outcome = match outcome {
            Ok(o) => o,
            Err(e) if rp.fail_open => {
                tracing::warn!(error = %e, route = %covered.label, "store unavailable; forwarding unrecorded (fail_open)");
                count(&covered.label, "fail_open");
                return pass_through(inner, request).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, route = %covered.label, "store unavailable; answering 503");
                return reject(IdempotencyRejection::StoreUnavailable);
            }
        };
        let (record, now) = match outcome {
            AcquireOutcome::Acquired { lease, takeover } => {
                count(
                    &covered.label,
                    if takeover { "takeover" } else { "acquired" },
                );
                return execute(inner, &*store, &covered, lease, request).await;
            }
            AcquireOutcome::Existing { record, now } => (record, now),
        };
        let version = record.fingerprint.version;
        if version != acquire.fingerprint.version {
            // A record from a release with another fingerprint algorithm: compare it with
            // this request fingerprinted that way, so an upgrade never turns in-flight
            // retries into mismatches (DESIGN.md, "Fingerprint safety").
            let req = (request.method(), request.uri(), request.headers());
            if let Some(fp) = fingerprint_of(req, &covered.scope.route, rp, &covered.body, version)
            {
                acquire.fingerprint = fp;
            }
        }
        return match decide(Some(&record), &acquire.fingerprint, now, &acquire.policy) {
            Decision::Replay => {
                count(&covered.label, "replayed");
                Ok(replay(
                    record
                        .response
                        .as_ref()
                        .expect("a replayable record has a response"),
                ))
            }
            Decision::NotReplayable => reject(IdempotencyRejection::ResponseNotKept {
                original_status: record.response.map_or(0, |r| r.status),
            }),
            Decision::InFlight { retry_after_ms } => {
                reject(IdempotencyRejection::RequestInFlight {
                    retry_after_secs: retry_after_ms.div_ceil(1000).max(1),
                })
            }
            Decision::Mismatch => reject(IdempotencyRejection::FingerprintMismatch {
                status: rp.mismatch_status,
            }),
            Decision::PreviousFailed => reject(IdempotencyRejection::PreviousAttemptFailed),
            Decision::Insert | Decision::Takeover => continue,
        };
    }
    reject(IdempotencyRejection::StoreUnavailable)
}

/// Forwards under `lease` and records the outcome.
async fn execute<S, St, ResB>(
    mut inner: S,
    store: &St,
    covered: &Covered,
    lease: Lease,
    request: Request<BoxBody>,
) -> Result<Response<BoxBody>, S::Error>
where
    S: Service<Request<BoxBody>, Response = Response<ResB>>,
    S::Error: 'static,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
    St: IdempotencyStore,
{
    let rp = &covered.route;
    let ttl = rp.lease_ttl;
    let handle = LeaseHandle::new(lease.clone());
    let mut request = request;
    request.extensions_mut().insert(handle.clone());
    let response = match with_renewal(store, &lease, ttl, inner.call(request)).await {
        Ok(r) if handle.is_completed() => return Ok(r.map(boxed)),
        Ok(r) => r,
        Err(e) if handle.is_completed() => return Err(e),
        Err(e) => {
            if not_sent(&e) {
                write_outcome("release", || store.release(&lease)).await;
            } else {
                write_outcome("fail", || store.fail(&lease)).await;
            }
            return Err(e);
        }
    };
    let (parts, body) = response.into_parts();
    let body = boxed(body);
    match rp.action_for(parts.status) {
        StatusAction::Release => {
            write_outcome("release", || store.release(&lease)).await;
            return Ok(Response::from_parts(parts, body));
        }
        StatusAction::Fail => {
            write_outcome("fail", || store.fail(&lease)).await;
            return Ok(Response::from_parts(parts, body));
        }
        StatusAction::Store => {}
    }
    let cap = rp.max_stored_response_bytes;
    let stored = |body: Bytes, replayable: bool| StoredResponse {
        status: parts.status.as_u16(),
        headers: headers_to_store(&parts.headers, &rp.replay_deny_headers),
        body,
        replayable,
    };
    if is_streaming(&parts.headers)
        || content_length(&parts.headers).is_some_and(|n| n > cap as u64)
    {
        let record = stored(Bytes::new(), false);
        write_outcome("complete", || store.complete(&lease, &record)).await;
        return Ok(Response::from_parts(parts, body));
    }
    match with_renewal(store, &lease, ttl, buffer_up_to(body, cap)).await {
        Buffered::Complete(bytes) => {
            let record = stored(bytes.clone(), true);
            write_outcome("complete", || store.complete(&lease, &record)).await;
            Ok(Response::from_parts(parts, full(bytes)))
        }
        Buffered::Exceeded { prefix, rest } => {
            let record = stored(Bytes::new(), false);
            write_outcome("complete", || store.complete(&lease, &record)).await;
            Ok(Response::from_parts(parts, chain(prefix, rest)))
        }
        Buffered::Failed(e) => {
            tracing::warn!(error = %e, route = %covered.label, "upstream response broke off; failing the record");
            write_outcome("fail", || store.fail(&lease)).await;
            Ok(IdempotencyRejection::UpstreamResponseFailed
                .into_response(&covered.policy.problem_type_base))
        }
    }
}

/// Runs `fut` while renewing `lease` every third of `ttl`, so the lease only lapses when
/// its holder died.
async fn with_renewal<St: IdempotencyStore, F: Future>(
    store: &St,
    lease: &Lease,
    ttl: Duration,
    fut: F,
) -> F::Output {
    let renew = async {
        let mut held = true;
        loop {
            tokio::time::sleep(ttl / 3).await;
            if !held {
                continue;
            }
            match store.renew(lease, ttl).await {
                Ok(_) => {}
                Err(StoreError::LeaseLost) => {
                    metrics::counter!("idempotency_lease_lost_total").increment(1);
                    tracing::warn!(key = ?lease.key, "lease lost while the request ran");
                    held = false;
                }
                Err(e) => tracing::warn!(error = %e, "lease renewal failed; will retry"),
            }
        }
    };
    tokio::pin!(fut);
    tokio::select! {
        biased;
        out = &mut fut => out,
        never = renew => never,
    }
}

/// Writes an outcome, retrying transient store errors (5 attempts, 25 ms doubling). If it
/// finally fails, the record stays `in_progress` under its lease: never released.
async fn write_outcome<F, Fut>(what: &'static str, mut op: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), StoreError>>,
{
    let mut delay = Duration::from_millis(25);
    for attempt in 1..=5 {
        match op().await {
            Ok(()) => return,
            Err(StoreError::LeaseLost) => {
                metrics::counter!("idempotency_lease_lost_total").increment(1);
                tracing::warn!(op = what, "outcome refused: the lease was taken over");
                return;
            }
            Err(e) if attempt == 5 => {
                tracing::error!(op = what, error = %e, "outcome write failed; the record stays in progress until its lease expires");
            }
            Err(e) => {
                tracing::warn!(op = what, error = %e, attempt, "outcome write failed; retrying");
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
        }
    }
}

async fn pass_through<S, B, ResB>(
    mut inner: S,
    req: Request<B>,
) -> Result<Response<BoxBody>, S::Error>
where
    S: Service<Request<BoxBody>, Response = Response<ResB>>,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let resp = inner.call(req.map(boxed)).await?;
    Ok(resp.map(boxed))
}

/// True when the inner error says the request never reached the operation.
fn not_sent<E: 'static>(e: &E) -> bool {
    let any = e as &dyn Any;
    if any.is::<NotSent>() {
        return true;
    }
    let Some(boxed) = any.downcast_ref::<BoxError>() else {
        return false;
    };
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(boxed.as_ref());
    while let Some(e) = source {
        if e.is::<NotSent>() {
            return true;
        }
        source = e.source();
    }
    false
}

fn principal_of(headers: &HeaderMap, source: &PrincipalSource) -> Option<String> {
    match source {
        PrincipalSource::AuthorizationHash => {
            let mut values = headers
                .get_all(AUTHORIZATION)
                .iter()
                .filter(|v| !v.as_bytes().trim_ascii().is_empty())
                .peekable();
            values.peek()?;
            let mut h = Sha256::new();
            for v in values {
                h.update(v.as_bytes());
                h.update(b"\n");
            }
            Some(format!("auth:{}", hex::encode(&h.finalize()[..16])))
        }
        PrincipalSource::Header(name) => headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(|v| format!("hdr:{v}")),
    }
}

/// The request's fingerprint by algorithm `version` (`None` if this build does not know it).
fn fingerprint_of(
    req: (&http::Method, &http::Uri, &HeaderMap),
    route: &str,
    rp: &RoutePolicy,
    body: &[u8],
    version: u16,
) -> Option<Fingerprint> {
    let (method, uri, headers) = req;
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let extra: Vec<(&str, &[u8])> = rp
        .fingerprint_headers
        .iter()
        .flat_map(|n| {
            headers
                .get_all(n)
                .iter()
                .map(move |v| (n.as_str(), v.as_bytes()))
        })
        .collect();
    let input = FingerprintInput {
        method: method.as_str(),
        route,
        path: uri.path(),
        query: uri.query(),
        content_type: header(CONTENT_TYPE),
        content_encoding: header(CONTENT_ENCODING),
        headers: &extra,
        body,
    };
    let opts = FingerprintOptions {
        ignore_json_pointers: &rp.ignore_json_pointers,
        max_decoded_bytes: rp.max_body_bytes.saturating_mul(8),
    };
    Fingerprint::compute_version(version, &input, &opts)
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Responses that stream by nature are delivered unbuffered and not kept.
fn is_streaming(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            ct.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

/// The problem response for `r`, counted under `route`.
fn rejection(route: &str, type_base: &str, r: IdempotencyRejection) -> Response<BoxBody> {
    count(route, outcome_label(&r));
    r.into_response(type_base)
}

fn outcome_label(r: &IdempotencyRejection) -> &'static str {
    match r {
        IdempotencyRejection::RequestInFlight { .. } => "conflict",
        IdempotencyRejection::FingerprintMismatch { .. } => "mismatch",
        IdempotencyRejection::StoreUnavailable => "store_unavailable",
        IdempotencyRejection::PreviousAttemptFailed => "previous_failed",
        IdempotencyRejection::ResponseNotKept { .. } => "not_kept",
        _ => "rejected",
    }
}

fn count(route: &str, outcome: &'static str) {
    metrics::counter!("idempotency_requests_total", "outcome" => outcome, "route" => route.to_owned())
        .increment(1);
}
