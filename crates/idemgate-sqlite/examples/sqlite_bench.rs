//! Insert + complete throughput of [`SqliteStore`] on a temporary file, at concurrency 1
//! and 32, with each durability setting.
//!
//! ```text
//! cargo run --release -p idemgate-sqlite --example sqlite_bench [-- OPS]
//! ```

use std::sync::Arc;
use std::time::Duration;

use idemgate_core::testing::{fp, request, response, unique_key};
use idemgate_core::{IdempotencyStore, InsertOutcome};
use idemgate_sqlite::{SqliteOptions, SqliteStore, Synchronous};
use tokio::time::Instant;

const LEASE: Duration = Duration::from_secs(10);
const TTL: Duration = Duration::from_secs(86_400);

/// Runs `ops` fresh-key insert + complete pairs over `concurrency` tasks; returns pairs/s.
async fn run(store: Arc<SqliteStore>, ops: usize, concurrency: usize) -> f64 {
    let resp = Arc::new(response(256));
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (store, resp) = (store.clone(), resp.clone());
            tokio::spawn(async move {
                for _ in 0..ops / concurrency {
                    let k = unique_key("bench");
                    let req = request(&k, fp(1), LEASE, TTL);
                    let InsertOutcome::Inserted(lease) = store.insert_or_get(&req).await.unwrap()
                    else {
                        panic!("a fresh key is inserted");
                    };
                    store.complete(&lease, &resp).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    (ops / concurrency * concurrency) as f64 / started.elapsed().as_secs_f64()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let ops: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("OPS is a number"))
        .unwrap_or(20_000);
    let cases = [
        ("NORMAL", Synchronous::Normal, 64),
        ("NORMAL, max_batch 1", Synchronous::Normal, 1),
        ("FULL", Synchronous::Full, 64),
        ("FULL, max_batch 1", Synchronous::Full, 1),
    ];
    for (name, sync, max_batch) in cases {
        for concurrency in [1, 32] {
            let dir = tempfile::tempdir().unwrap();
            let options = SqliteOptions::default()
                .with_synchronous(sync)
                .with_max_batch(max_batch);
            let store = Arc::new(SqliteStore::open(dir.path().join("bench.db"), options).unwrap());
            // FULL without grouping pays one fsync per operation: fewer ops keep it short.
            let n = if sync == Synchronous::Full && max_batch == 1 {
                ops / 10
            } else {
                ops
            };
            let rate = run(store, n, concurrency).await;
            println!("{name:<22} concurrency {concurrency:>2}: {rate:>9.0} insert+complete/s");
        }
    }
}
