//! [`IdempotencyLayer`]: applies [`Idempotency`] to a service.

use std::sync::Arc;

use idemgate_core::{IdempotencyStore, Lifecycle};
use tokio_util::task::TaskTracker;
use tower::Layer;

use crate::limits::Limiter;
use crate::policy::Policy;
use crate::service::Idempotency;

/// Applies the idempotency contract to the wrapped service: see [`Idempotency`].
///
/// Every service this layer makes shares one state of per-principal limits
/// ([`crate::limits`]): the limits of a route hold across them, per layer (per process).
///
/// # Examples
/// ```
/// use std::convert::Infallible;
/// use std::sync::Arc;
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
///     .layer(IdempotencyLayer::new(Arc::new(MemoryStore::new()), Policy::default()))
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
    lifecycle: Lifecycle<St>,
    policy: Arc<Policy>,
    tasks: TaskTracker,
    limiter: Arc<Limiter>,
}

impl<St> Clone for IdempotencyLayer<St> {
    fn clone(&self) -> Self {
        Self {
            lifecycle: self.lifecycle.clone(),
            policy: self.policy.clone(),
            tasks: self.tasks.clone(),
            limiter: self.limiter.clone(),
        }
    }
}

impl<St: IdempotencyStore> IdempotencyLayer<St> {
    /// A layer that records in `store` under `policy`.
    pub fn new(store: Arc<St>, policy: Policy) -> Self {
        Self {
            lifecycle: Lifecycle::new(store, policy.lifecycle.clone()),
            policy: Arc::new(policy),
            tasks: TaskTracker::new(),
            limiter: Arc::default(),
        }
    }
}

impl<St> IdempotencyLayer<St> {
    /// The lifecycle every service of this layer runs requests through.
    pub fn lifecycle(&self) -> &Lifecycle<St> {
        &self.lifecycle
    }

    /// The detached tasks (forwarded operations and their outcome writes) of every service
    /// this layer made. Before the runtime shuts down, `close()` it and await `wait()`:
    /// a task cut off there would leave its record `in_progress` until its lease lapses,
    /// and a retry would then run the operation again.
    pub fn detached_tasks(&self) -> &TaskTracker {
        &self.tasks
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// This layer with another policy (a configuration reload): the lifecycle (store,
    /// store deadline, pending-outcome bounds), the detached tasks and the per-principal
    /// limits' state stay shared with `self`, so in-flight work and limits carry over.
    /// `policy.lifecycle` is not applied: the engine keeps the settings it started with.
    #[must_use]
    pub fn with_policy(&self, policy: Policy) -> Self {
        Self {
            lifecycle: self.lifecycle.clone(),
            policy: Arc::new(policy),
            tasks: self.tasks.clone(),
            limiter: self.limiter.clone(),
        }
    }
}

impl<S, St> Layer<S> for IdempotencyLayer<St> {
    type Service = Idempotency<S, St>;

    fn layer(&self, inner: S) -> Self::Service {
        Idempotency::with_lifecycle(
            inner,
            self.lifecycle.clone(),
            self.policy.clone(),
            self.tasks.clone(),
        )
        .sharing_limits(self.limiter.clone())
    }
}
