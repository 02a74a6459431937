//! What the inner service sees of the lease, and how it says a request was not sent.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use idemgate_core::{BoxError, Lease};

use crate::policy::RoutePolicy;
use crate::transaction::TxStore;

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
/// business rows, calls `LeaseHandle::complete_in(&mut *tx, response)` (features `axum` and
/// `postgres`, on a layer built with `IdempotencyLayer::with_transactions`) before its commit: one call that stores the response through the layer's
/// header filter and marks the lease completed, so the middleware writes no outcome of its
/// own. With axum, the handle is an extractor (feature `axum`: `lease: LeaseHandle`, a
/// `400` `missing-key` when the request holds no lease) or `Extension<LeaseHandle>`.
/// Lower level: `PostgresStore::complete_using`, then [`LeaseHandle::mark_completed`].
#[derive(Clone, Debug)]
pub struct LeaseHandle(Arc<LeaseState>);

struct LeaseState {
    lease: Lease,
    takeover: bool,
    completed: AtomicBool,
    /// The layer's store for completion in the caller's transaction, if it has one.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    transactional: Option<TxStore>,
    /// The route's policy: its header filter and status rules.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    route: Arc<RoutePolicy>,
}

impl std::fmt::Debug for LeaseState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseState")
            .field("lease", &self.lease)
            .field("takeover", &self.takeover)
            .field("completed", &self.completed)
            .finish_non_exhaustive()
    }
}

impl LeaseHandle {
    pub(crate) fn new(
        lease: Lease,
        takeover: bool,
        transactional: Option<TxStore>,
        route: Arc<RoutePolicy>,
    ) -> Self {
        Self(Arc::new(LeaseState {
            lease,
            takeover,
            completed: AtomicBool::new(false),
            transactional,
            route,
        }))
    }

    /// The layer's store for completion in the caller's transaction, if it has one.
    #[cfg(feature = "postgres")]
    pub(crate) fn transactional(&self) -> Option<&TxStore> {
        self.0.transactional.as_ref()
    }

    /// The route's policy.
    #[cfg(feature = "postgres")]
    pub(crate) fn route(&self) -> &RoutePolicy {
        &self.0.route
    }

    /// The lease: pass it to the store's `complete_using`.
    pub fn lease(&self) -> &Lease {
        &self.0.lease
    }

    /// True when this request took over a record whose earlier attempt's lease lapsed: that
    /// attempt may have run (the request also carries `Idempotent-Takeover: true`).
    pub fn is_takeover(&self) -> bool {
        self.0.takeover
    }

    /// Says the record was completed by the service itself, so the layer writes no outcome
    /// (call it after the commit; `complete_in` calls it for you).
    pub fn mark_completed(&self) {
        self.0.completed.store(true, Ordering::SeqCst);
    }

    /// True once [`LeaseHandle::mark_completed`] was called.
    pub fn is_completed(&self) -> bool {
        self.0.completed.load(Ordering::SeqCst)
    }
}

/// How the layer asks an inner service's error whether the request was sent: the
/// service's `S::Error` implements it. A `true` releases the record, so the same key can be
/// retried; a `false` fails it, because the operation may have run.
///
/// Implemented for [`BoxError`] (true when [`NotSent`] is the error or in its `source()`
/// chain), [`NotSent`] (true) and [`Infallible`](std::convert::Infallible) (axum's
/// services). An application's own error type implements it to say which of its errors
/// mean "not sent".
pub trait SendFailure {
    /// True when the request never reached the operation.
    fn not_sent(&self) -> bool;
}

impl SendFailure for BoxError {
    fn not_sent(&self) -> bool {
        let first: &(dyn std::error::Error + 'static) = self.as_ref();
        std::iter::successors(Some(first), |e| e.source()).any(|e| e.is::<NotSent>())
    }
}

impl SendFailure for NotSent {
    fn not_sent(&self) -> bool {
        true
    }
}

impl SendFailure for std::convert::Infallible {
    fn not_sent(&self) -> bool {
        match *self {}
    }
}
