//! Gateway slots: a slot is one gateway process (its journal file survives it); the
//! instance running in it is the real tower layer ([`IdempotencyLayer`], which runs the
//! real lifecycle) over the simulated store, and over the simulated upstream as a tower
//! service or, on [`Path::Proxy`], over the gateway's real proxy to it. A crash kills the
//! instance at whatever await point each of its tasks is: none of them ever takes another
//! step.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use http::HeaderName;
use idemgate_core::engine::LeaseExpiredPolicy;
use idemgate_tower::{IdempotencyLayer, Policy, PrincipalSource, RoutePolicy};
use tower::util::BoxCloneService;
use tower::Layer;

use crate::journal::Journal;
use crate::slot::{Shared, SlotStore};
use crate::upstream::{Svc, Upstream};
use crate::wire::Ends;
use crate::{Path, Planted};

/// The lease every route uses (the default).
pub const LEASE: Duration = Duration::from_secs(10);

/// A running gateway instance.
#[derive(Clone, Debug)]
pub struct Instance {
    /// Its id, unique in the run.
    pub id: u64,
    alive: Arc<AtomicBool>,
    /// The layered service clients call.
    pub svc: Svc,
}

/// One gateway process's place: its journal and the instance running now, if any.
#[derive(Debug, Default)]
pub struct Slot {
    /// The slot's forward journal.
    pub journal: Arc<Journal>,
    current: Mutex<Option<Instance>>,
    /// A failover happened while no instance ran: restore at the next start.
    pub restore_pending: AtomicBool,
}

/// The routes: `POST /pay` with the defaults, `POST /to` opted in to take-overs. With the
/// planted [`Planted::TakeoverByDefault`], `/pay` takes over too.
pub fn policy(planted: Option<Planted>) -> Policy {
    let pay = match planted {
        Some(Planted::TakeoverByDefault) => LeaseExpiredPolicy::Takeover,
        _ => LeaseExpiredPolicy::Unknown,
    };
    let principal = PrincipalSource::Header(HeaderName::from_static("x-user"));
    Policy::default()
        .with_principal(principal)
        .with_route("POST /pay", RoutePolicy::default().with_lease_expired(pay))
        .and_then(|p| {
            let to = RoutePolicy::default().with_lease_expired(LeaseExpiredPolicy::Takeover);
            p.with_route("POST /to", to)
        })
        .expect("the simulation's routes are valid")
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, Option<Instance>> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The instance running now (`None`: crashed, connections refused).
    pub fn current(&self) -> Option<Instance> {
        self.lock().clone()
    }

    /// Starts a new instance (restoring the journal first after a failover it missed).
    pub fn start(&self, shared: &Arc<Shared>, upstream: &Arc<Upstream>) -> u64 {
        let id = shared.next_instance.fetch_add(1, Ordering::Relaxed);
        let alive = Arc::new(AtomicBool::new(true));
        let store = SlotStore::new(shared.clone(), self.journal.clone(), id, alive.clone());
        let layer = IdempotencyLayer::new(store, policy(shared.planted));
        let (cluster, rng) = (shared.cluster.clone(), shared.rng.clone());
        let svc = match shared.path {
            Path::Tower => {
                let up = upstream.service(cluster, rng, id, alive.clone());
                BoxCloneService::new(layer.layer(up))
            }
            Path::Proxy => {
                let upstream = upstream.clone();
                let alive = alive.clone();
                let ends = Ends {
                    upstream,
                    cluster,
                    rng,
                    instance: id,
                    alive,
                };
                crate::served::gateway(&layer, Arc::new(ends), shared.upstream_timeout)
            }
        };
        if self.restore_pending.swap(false, Ordering::Relaxed) {
            self.journal
                .restore(&shared.cluster, Some(id), crate::slot::ms(LEASE));
        }
        *self.lock() = Some(Instance { id, alive, svc });
        id
    }

    /// Kills the running instance, if any.
    pub fn crash(&self) -> bool {
        match self.lock().take() {
            Some(i) => {
                i.alive.store(false, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// Whether instance `id` runs here.
    pub fn runs(&self, id: u64) -> bool {
        self.lock().as_ref().is_some_and(|i| i.id == id)
    }
}
