//! What waiting for a replica costs: sequential fresh keys with `wait_replicas` 0 and 1 on
//! the local replicated pair. Ignored (timing, not correctness); run it by name:
//! `cargo test -p idemgate-redis --test replication -- --ignored --nocapture cost`.

use std::time::Duration;

use idemgate_core::testing::{fp, inserted, request, unique_key};
use idemgate_core::IdempotencyStore;
use idemgate_redis::{RedisOptions, RedisStore};
use tokio::time::Instant;

use crate::replica_set::ReplicaSet;
use crate::{DAY, LONG, WAIT};

const KEYS: usize = 1000;
const RUNS: usize = 3;

async fn fresh_keys(store: &RedisStore) -> Duration {
    let started = Instant::now();
    for _ in 0..KEYS {
        let k = unique_key("alice");
        let outcome = store.insert_or_get(&request(&k, fp(1), LONG, DAY)).await;
        inserted(outcome.unwrap());
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run it by name"]
async fn cost_of_waiting_for_one_replica() {
    let Some(set) = ReplicaSet::start() else {
        return;
    };
    for replicas in [0, 1] {
        let opts = RedisOptions::default().with_wait(replicas, WAIT);
        let store = ReplicaSet::store(&set.primary_url(), &opts).await;
        fresh_keys(&store).await; // warm up: scripts loaded, connections open
        let mut runs: Vec<Duration> = Vec::new();
        for _ in 0..RUNS {
            runs.push(fresh_keys(&store).await);
        }
        runs.sort();
        let median = runs[RUNS / 2];
        println!(
            "wait_replicas {replicas}: {KEYS} sequential fresh keys in {median:?} (median of \
             {RUNS}: {runs:?}), {:.1} us per key",
            median.as_secs_f64() * 1e6 / KEYS as f64
        );
    }
}
