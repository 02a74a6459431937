//! One run: the store, two gateway slots, the clients of one to three keys, the
//! replication of the standby, and a seeded schedule of faults; then the store healed, the
//! gateways given time to finish, and the checks ([`crate::check`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::{client, key_name, route, Got};
use crate::cluster::Cluster;
use crate::gateway::{Slot, LEASE};
use crate::rng::Rng;
use crate::slot::{ms, FaultRates, Owners, Shared};
use crate::upstream::Upstream;
use crate::{Path, Planted, Report};

/// How long after a failover new keys stay refused (`failover_grace`, the default).
const GRACE: Duration = Duration::from_secs(10);

/// Everything one run holds.
#[derive(Debug)]
pub struct World {
    /// What the slot stores share.
    pub shared: Arc<Shared>,
    /// The gateway slots.
    pub slots: Arc<Vec<Slot>>,
    /// The upstream.
    pub upstream: Arc<Upstream>,
    /// The keys, with their routes.
    pub keys: Vec<(String, &'static str)>,
}

impl World {
    fn new(seed: u64, planted: Option<Planted>, path: Path) -> Self {
        let rng = Rng::new(seed);
        let rates = FaultRates {
            slow: rng.range(0, 15),
            lost_before: rng.range(0, 10),
            lost_after: rng.range(0, 10),
        };
        // Drawn on the proxy path only: the tower path's runs stay what they were.
        let upstream_timeout = match path {
            Path::Proxy if rng.chance(20) => rng.millis(5_000, 30_000),
            _ => Duration::from_secs(60),
        };
        let shared = Arc::new(Shared {
            cluster: Arc::new(Cluster::new()),
            rng,
            rates,
            planted,
            path,
            upstream_timeout,
            owners: Owners::default(),
            next_instance: 1.into(),
        });
        let upstream = Arc::new(Upstream::default());
        let slots: Arc<Vec<Slot>> = Arc::new((0..2).map(|_| Slot::default()).collect());
        for slot in slots.iter() {
            slot.start(&shared, &upstream);
        }
        let keys = (0..shared.rng.range(1, 3))
            .map(|n| (key_name(seed, n), route(&shared.rng)))
            .collect();
        Self {
            shared,
            slots,
            upstream,
            keys,
        }
    }
}

/// Runs `seed` on the current (paused, single-threaded) runtime.
pub async fn simulate(seed: u64, planted: Option<Planted>, path: Path) -> Report {
    let world = World::new(seed, planted, path);
    let stop = Arc::new(AtomicBool::new(false));
    let replicator = tokio::spawn(replicate(
        world.shared.clone(),
        world.slots.clone(),
        stop.clone(),
    ));
    let faults = tokio::spawn(faults(
        world.shared.clone(),
        world.slots.clone(),
        world.upstream.clone(),
    ));
    let clients: Vec<JoinHandle<Vec<Got>>> = world
        .keys
        .iter()
        .flat_map(|(key, route)| {
            // One or two clients per key: a retrying client, and sometimes a second click.
            (0..world.shared.rng.range(1, 2)).map(|_| {
                let (shared, slots) = (world.shared.clone(), world.slots.clone());
                let sends = shared.rng.range(1, 5);
                tokio::spawn(client(shared, slots, key.clone(), route, sends))
            })
        })
        .collect();
    let mut got = Vec::new();
    for c in clients {
        got.extend(c.await.unwrap_or_default());
    }
    faults.abort();
    heal(&world).await;
    stop.store(true, Ordering::Relaxed);
    let _ = replicator.await;
    crate::check::check(seed, planted, &world, &got)
}

/// The standby follows the primary, up to three commits behind; journals drop what it holds.
async fn replicate(shared: Arc<Shared>, slots: Arc<Vec<Slot>>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(shared.rng.millis(50, 2_000)).await;
        shared.cluster.replicate(shared.rng.below(4) as usize);
        let held = shared.cluster.replicated();
        for slot in slots.iter() {
            slot.journal.confirm(held);
        }
    }
}

/// Ends the faults: the store reachable, every slot running; then time for the gateways to
/// finish what they hold (outcome writes retried, leases lapsing).
async fn heal(world: &World) {
    world.shared.cluster.set_unreachable(false);
    for slot in world.slots.iter() {
        if slot.current().is_none() {
            slot.start(&world.shared, &world.upstream);
        }
    }
    tokio::time::sleep(Duration::from_secs(120)).await;
}

/// The seeded schedule: up to five faults in the first 40 s.
async fn faults(shared: Arc<Shared>, slots: Arc<Vec<Slot>>, upstream: Arc<Upstream>) {
    let rng = shared.rng.clone();
    let start = Instant::now();
    let mut at: Vec<u64> = (0..rng.range(0, 6)).map(|_| rng.range(0, 40_000)).collect();
    at.sort_unstable();
    let mut failed_over = false;
    for t in at {
        tokio::time::sleep_until(start + Duration::from_millis(t)).await;
        match rng.below(if failed_over { 3 } else { 4 }) {
            0 => crash(&shared, &slots, &upstream).await,
            1 => outage(&shared).await,
            2 => jump(&shared),
            _ => {
                failed_over = true;
                failover(&shared, &slots, &upstream);
            }
        }
    }
}

async fn crash(shared: &Arc<Shared>, slots: &Arc<Vec<Slot>>, upstream: &Arc<Upstream>) {
    let slot = &slots[shared.rng.below(slots.len() as u64) as usize];
    if slot.crash() {
        shared.cluster.fault("gateway crash");
        tokio::time::sleep(shared.rng.millis(100, 5_000)).await;
        slot.start(shared, upstream);
    }
}

async fn outage(shared: &Shared) {
    shared.cluster.fault("store unreachable");
    shared.cluster.set_unreachable(true);
    tokio::time::sleep(shared.rng.millis(500, 15_000)).await;
    shared.cluster.set_unreachable(false);
}

fn jump(shared: &Shared) {
    let by = shared.rng.range(0, 50_000) as i64 - 10_000;
    shared.cluster.fault("store clock jump");
    shared.cluster.trace(format!("clock jumps {by} ms"));
    shared.cluster.jump_clock(by);
}

/// The standby is promoted, losing the unreplicated suffix; each journal closes its gate,
/// restores (a running instance soon, a crashed one when it starts) and opens after the
/// grace.
fn failover(shared: &Arc<Shared>, slots: &Arc<Vec<Slot>>, _upstream: &Arc<Upstream>) {
    let lost = shared.cluster.failover();
    shared.cluster.fault("failover");
    shared
        .cluster
        .trace(format!("failover loses {lost} commits"));
    if shared.planted == Some(Planted::JournalIgnored) {
        return;
    }
    for (n, slot) in slots.iter().enumerate() {
        slot.journal.close_gate(shared.cluster.primary().now());
        let restore_in = shared.rng.millis(10, 3_000);
        let (shared, slots) = (shared.clone(), slots.clone());
        tokio::spawn(async move {
            tokio::time::sleep(restore_in).await;
            let slot = &slots[n];
            match slot.current() {
                Some(i) => slot.journal.restore(&shared.cluster, Some(i.id), ms(LEASE)),
                None => slot.restore_pending.store(true, Ordering::Relaxed),
            }
            tokio::time::sleep(GRACE.saturating_sub(restore_in)).await;
            while slot.restore_pending.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            slot.journal.open_gate();
        });
    }
}
