//! [`Idempotency`]: the middleware service.

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use idemgate_core::{BoxError, IdempotencyStore};
use tokio_util::task::TaskTracker;
use tower::Service;

use crate::admission::{handle, Ctx};
use crate::body::{boxed, BoxBody};
use crate::future::ResponseFuture;
use crate::layer::IdempotencyLayer;
use crate::lease::SendFailure;
use crate::metrics::Meters;
use crate::policy::Policy;
use crate::replay::{IDEMPOTENT_BODY_OMITTED, IDEMPOTENT_REDACTED, IDEMPOTENT_TAKEOVER};

/// The idempotency middleware. For each request:
///
/// 1. A method that is not covered passes through untouched (its future is not boxed); a
///    covered one in another letter case (`post`) gets `400 ambiguous-request`.
/// 2. The path is matched in normal form ([`Policy::resolve`]): a spelling servers read
///    differently gets `400 ambiguous-path`, an unmatched path `404` under
///    [`Unmatched::Refuse`](crate::path::Unmatched::Refuse), with or without a key; so does
///    a header that makes some upstream run another path or method
///    ([`Policy::override_headers`]: `400 ambiguous-request`). The key
///    header is parsed (`400` if malformed); without one, the request passes through, or
///    gets `400` if the route requires a key. A keyed request that repeats `Content-Type`,
///    `Content-Encoding` or a `fingerprint_headers` header gets `400 ambiguous-request`.
/// 3. The principal is read ([`crate::principal`]: `401` without one or with an invalid
///    token, `400` if ambiguous), its per-principal limits of the route are checked (`429`,
///    see [`crate::limits`]), the body is buffered up to `max_body_bytes` (`413` above), and
///    the fingerprint is computed: inline for small identity bodies, on the blocking pool
///    (one job per CPU) for large or encoded ones; an encoded body that decodes past the
///    route's decoded-body limit gets `413`.
/// 4. The core lifecycle ([`idemgate_core::lifecycle`]) acquires (principal, route, key) and
///    decides. A live record is answered from: replay, `409` in flight, `422` mismatch,
///    `500` failed, `500` outcome unknown (a lapsed lease), `500` record corrupt, `410` not
///    kept. A store failure or timeout is `503` (or an unrecorded forward on `fail_open`
///    routes).
/// 5. The request is forwarded (with `Idempotent-Takeover: true` after a takeover, and a
///    [`LeaseHandle`](crate::LeaseHandle) in its extensions) while the lease is renewed
///    every third of its TTL; the response is stored, or the record released or failed by
///    the route's status rules. The outcome write is retried until it lands; the client gets
///    its response once the write landed or the store deadline passed, whichever comes first.
///
/// Every answer idemgate gives itself is an [`IdempotencyRejection`](crate::IdempotencyRejection)
/// as `application/problem+json`; the inner service's errors pass through as `S::Error`.
///
/// # Cancel safety
/// From step 4 on, the work runs in its own task: a client that disconnects drops only the
/// response future, while the acquire, the forwarded operation and the write of its outcome
/// run to the end. Otherwise a retry would find the key released, or in progress forever,
/// and could run the operation twice. Await [`IdempotencyLayer::drain`] before the runtime
/// stops.
#[derive(Debug)]
pub struct Idempotency<S, St> {
    pub(crate) inner: S,
    /// What each covered request shares with the service.
    pub(crate) ctx: Ctx<St>,
    /// The handles of the policy's metrics, made (and registered) for this service.
    pub(crate) meters: Arc<Meters>,
}

impl<S: Clone, St> Clone for Idempotency<S, St> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            ctx: self.ctx.clone(),
            meters: self.meters.clone(),
        }
    }
}

impl<S, St: IdempotencyStore> Idempotency<S, St> {
    /// Wraps `inner`, recording in `store` under `policy` (a service of its own; prefer
    /// [`IdempotencyLayer`], whose services share detached work and limits).
    pub fn new(inner: S, store: St, policy: Policy) -> Self {
        IdempotencyLayer::new(store, policy).wrap(inner)
    }

    /// A layer that wraps services in this middleware: [`IdempotencyLayer::new`].
    pub fn layer(store: St, policy: Policy) -> IdempotencyLayer<St> {
        IdempotencyLayer::new(store, policy)
    }
}

impl<S, St> Idempotency<S, St> {
    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The wrapped service, consuming the middleware.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The store.
    pub fn store(&self) -> &Arc<St> {
        self.ctx.lifecycle.store()
    }

    /// The detached tasks of this service: see [`IdempotencyLayer::drain`].
    pub fn detached_tasks(&self) -> &TaskTracker {
        &self.ctx.tasks
    }
}

impl<S, St, B, ResB> Service<Request<B>> for Idempotency<S, St>
where
    S: Service<Request<BoxBody>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: SendFailure + Send + 'static,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    St: IdempotencyStore,
{
    type Response = Response<BoxBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        // Reserved: only idemgate says a request is a takeover, or a response's stored form;
        // never trusted from clients.
        let headers = req.headers_mut();
        for reserved in [
            IDEMPOTENT_TAKEOVER,
            IDEMPOTENT_REDACTED,
            IDEMPOTENT_BODY_OMITTED,
        ] {
            headers.remove(reserved);
        }
        if self.ctx.policy.passes_untouched(req.method()) {
            let uncovered = self.meters.uncovered().clone();
            return ResponseFuture::pass_through(self.inner.call(req.map(boxed)), uncovered);
        }
        // `self.inner` was driven to readiness; a clone may not be. Keep the ready one for
        // this call and leave the clone for the next poll_ready.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let (ctx, meters) = (self.ctx.clone(), self.meters.clone());
        ResponseFuture::covered(Box::pin(handle(inner, ctx, meters, req)))
    }
}
