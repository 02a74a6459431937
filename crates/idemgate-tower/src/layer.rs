//! [`IdempotencyLayer`]: applies [`Idempotency`] to a service.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use idemgate_core::{IdempotencyStore, Lifecycle, PurgeHandle};
use tokio_util::task::TaskTracker;
use tower::Layer;

use crate::admission::Ctx;
use crate::metrics::Meters;
use crate::policy::Policy;
use crate::service::Idempotency;

/// Applies the idempotency contract to the wrapped service: see [`Idempotency`].
///
/// Every service this layer makes shares one state of per-principal limits
/// ([`crate::limits`]) and one set of detached tasks ([`IdempotencyLayer::drain`]): the
/// limits of a route hold across them, per layer (per process).
///
/// # Examples
/// ```
/// use std::convert::Infallible;
///
/// use http::{Request, Response};
/// use idemgate_core::MemoryStore;
/// use idemgate_tower::{body::{full, BoxBody}, IdempotencyLayer, Policy};
/// use tower::{service_fn, ServiceBuilder, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let payments = service_fn(|_req: Request<BoxBody>| async {
///     Ok::<_, Infallible>(Response::builder().status(201).body(full("charged".into())).unwrap())
/// });
/// let svc = ServiceBuilder::new()
///     .layer(IdempotencyLayer::new(MemoryStore::new(), Policy::default()))
///     .service(payments);
/// let req = || Request::post("/payments")
///     .header("idempotency-key", "8e03978e-40d5")
///     .header("authorization", "Bearer alice")
///     .body(full("{}".into())).unwrap();
/// let first = svc.clone().oneshot(req()).await.unwrap();
/// assert_eq!(first.status(), 201);
/// let retry = svc.oneshot(req()).await.unwrap();
/// assert_eq!(retry.headers()["idempotent-replayed"], "true");
/// # }
/// ```
#[derive(Debug)]
pub struct IdempotencyLayer<St> {
    /// What every service of this layer shares.
    pub(crate) ctx: Ctx<St>,
    /// The store's backend name, for the counters registered at 0 ([`crate::metrics::register`]).
    backend: &'static str,
}

impl<St> Clone for IdempotencyLayer<St> {
    fn clone(&self) -> Self {
        Self {
            ctx: self.ctx.clone(),
            backend: self.backend,
        }
    }
}

impl<St: IdempotencyStore> IdempotencyLayer<St> {
    /// A layer that records in `store` under `policy`.
    pub fn new(store: St, policy: Policy) -> Self {
        Self::from_arc(Arc::new(store), policy)
    }

    /// Spawns the store's background purge of expired records every `every`, in batches of
    /// `batch` ([`PurgeHandle::spawn`]); it stops when the handle is dropped, so keep it
    /// for as long as the layer serves. Not needed on Redis, which expires records itself.
    pub fn spawn_purge(&self, every: Duration, batch: NonZeroU32) -> PurgeHandle {
        PurgeHandle::spawn(self.ctx.lifecycle.store().clone(), every, batch)
    }

    /// [`IdempotencyLayer::new`] with a store shared with other owners (a handler that
    /// completes records itself, a purge task), without wrapping it in a second `Arc`.
    pub fn from_arc(store: Arc<St>, policy: Policy) -> Self {
        let backend = store.backend();
        let ctx = Ctx {
            lifecycle: Lifecycle::new(store, policy.lifecycle.clone()),
            policy: Arc::new(policy),
            tasks: TaskTracker::new(),
            limiter: Arc::default(),
            transactional: None,
        };
        Self { ctx, backend }
    }
}

impl<St: IdempotencyStore> IdempotencyLayer<St> {
    /// Seals the responses this layer stores with `keyring`'s first key, and opens the
    /// records it reads with any of its keys (encryption at rest,
    /// [`idemgate_core::seal`]). `None`: responses stored in clear (the default).
    pub fn with_keyring(mut self, keyring: Option<Arc<idemgate_core::seal::Keyring>>) -> Self {
        if let Some(tx) = self.ctx.transactional.as_mut() {
            tx.set_keyring(keyring.clone());
        }
        self.ctx.lifecycle = self.ctx.lifecycle.with_keyring(keyring);
        self
    }
}

impl<St> IdempotencyLayer<St> {
    /// The lifecycle every service of this layer runs requests through.
    pub fn lifecycle(&self) -> &Lifecycle<St> {
        &self.ctx.lifecycle
    }

    /// The detached tasks (forwarded operations and their outcome writes) of every service
    /// this layer made; [`IdempotencyLayer::drain`] awaits them.
    pub fn detached_tasks(&self) -> &TaskTracker {
        &self.ctx.tasks
    }

    /// Waits until every detached task of this layer's services has ended: the forwarded
    /// operations whose clients left and the writes of their outcomes. Await it after the
    /// server stopped accepting requests and before the runtime shuts down: a task cut off
    /// there would leave its record `in_progress` until its lease lapses, and its retries
    /// would get `outcome-unknown`. Bound it with a timeout (the longest operation plus a
    /// few seconds for outcome writes still being retried).
    ///
    /// Requests that arrive meanwhile still run; this then waits for them too.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future stops the waiting, never the tasks.
    pub async fn drain(&self) {
        self.end_waits();
        self.ctx.tasks.close();
        self.ctx.tasks.wait().await;
        self.ctx.tasks.reopen();
    }

    /// Ends the waits of duplicates under way (`on_in_flight = "wait"`): they answer `409`
    /// at once, and none of them starts a run. For shutdown: call it when the server stops
    /// accepting requests ([`IdempotencyLayer::drain`] calls it too). Waits that begin
    /// afterwards are not ended.
    pub fn end_waits(&self) {
        self.ctx.lifecycle.end_waits();
    }

    /// Wraps `inner` in the middleware ([`Layer::layer`]), after registering every counter
    /// series of the policy at 0 ([`crate::metrics::register`]).
    pub(crate) fn wrap<S>(&self, inner: S) -> Idempotency<S, St> {
        let meters = Arc::new(Meters::for_policy(&self.ctx.policy, self.backend));
        let ctx = self.ctx.clone();
        Idempotency { inner, ctx, meters }
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.ctx.policy
    }

    /// This layer with another policy (a configuration reload): the lifecycle (store,
    /// store deadline, pending-outcome bounds), the detached tasks and the per-principal
    /// limits' state stay shared with `self`, so in-flight work and limits carry over.
    /// `policy.lifecycle` is not applied: the engine keeps the settings it started with.
    #[must_use]
    pub fn with_policy(&self, policy: Policy) -> Self {
        let mut layer = self.clone();
        layer.ctx.policy = Arc::new(policy);
        layer
    }
}

impl<S, St> Layer<S> for IdempotencyLayer<St> {
    type Service = Idempotency<S, St>;

    fn layer(&self, inner: S) -> Self::Service {
        self.wrap(inner)
    }
}
