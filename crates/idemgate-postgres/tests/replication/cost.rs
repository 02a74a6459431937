//! What confirming each write costs: 1000 sequential fresh inserts on a sync cluster with
//! `require_synchronous_replication` off and on, three rounds each, medians printed.
//! Ignored by default (a measurement, not a check): run it with
//! `cargo test -p idemgate-postgres --test replication cost -- --ignored --nocapture`.

use std::time::Duration;

use idemgate_core::testing::{fp, inserted, request, unique_key};
use idemgate_core::IdempotencyStore;
use idemgate_postgres::{PostgresOptions, PostgresStore};
use tokio::time::Instant;

use crate::cluster::{Cluster, Mode};

const INSERTS: usize = 1000;
const ROUNDS: usize = 3;

/// The time of [`INSERTS`] sequential fresh inserts.
async fn round(store: &PostgresStore) -> Duration {
    let began = Instant::now();
    for _ in 0..INSERTS {
        let req = request(
            &unique_key("alice"),
            fp(1),
            Duration::from_secs(60),
            Duration::from_secs(600),
        );
        inserted(store.insert_or_get(&req).await.unwrap());
    }
    began.elapsed()
}

/// The transactions committed in the cluster's database so far (each statement of the
/// store is one), once the statistics are flushed (idle sessions flush theirs within 10 s).
async fn transactions(cluster: &Cluster) -> i64 {
    tokio::time::sleep(Duration::from_secs(11)).await;
    let mut conn = cluster.admin().await;
    let sql = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()";
    sqlx::query_scalar(sql).fetch_one(&mut conn).await.unwrap()
}

/// The median of [`ROUNDS`] rounds on `store`, after one warm-up round.
async fn median(store: &PostgresStore) -> Duration {
    round(store).await;
    let mut times = Vec::new();
    for _ in 0..ROUNDS {
        times.push(round(store).await);
    }
    times.sort();
    times[ROUNDS / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --ignored --nocapture"]
async fn cost_of_confirming_each_insert() {
    let cluster = Cluster::start(Mode::Sync).synchronous().await;
    let off = cluster.store(&PostgresOptions::new()).await;
    let on_options = PostgresOptions::new().with_require_synchronous_replication(true);
    let on = cluster.store(&on_options).await;
    for (name, store) in [("off", &off), ("on", &on), ("off", &off), ("on", &on)] {
        let t = median(store).await;
        let per = t / INSERTS as u32;
        println!("require_synchronous_replication {name}: {INSERTS} inserts in {t:?} (median of {ROUNDS}), {per:?} each");
    }
    for (name, store) in [("off", &off), ("on", &on)] {
        let before = transactions(&cluster).await;
        round(store).await;
        let per = (transactions(&cluster).await - before) as f64 / INSERTS as f64;
        println!("require_synchronous_replication {name}: {per:.2} statements per insert");
    }
    if let Some(url) = crate::common::url() {
        let local = PostgresStore::connect(&url).await.unwrap();
        let table = format!("idem_cost_{:08x}", rand::random::<u32>());
        let local = local.with_table_name(&table).unwrap();
        local.migrate().await.unwrap();
        let t = median(&local).await;
        println!(
            "local test server, requirement off: {INSERTS} inserts in {t:?} (median of {ROUNDS})"
        );
        crate::common::drop_table(&local).await;
    }
}
