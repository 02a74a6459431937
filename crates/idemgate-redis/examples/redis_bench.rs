//! Benchmark (not a test): insert + complete operations per second of [`RedisStore`] at a
//! given concurrency, against raw `SET key value NX PX 86400000` (redis-benchmark style) at
//! the same concurrency on the very same connection, and the ratio.
//!
//! ```text
//! cargo run --release -p idemgate-redis --example redis_bench -- [--concurrency 32] [--seconds 5] [--rounds 2]
//! ```
//!
//! The URL comes from `IDEMGATE_BENCH_REDIS_URL`, else `IDEMGATE_TEST_REDIS_URL`, else
//! `redis://127.0.0.1:6379`; a `redis+cluster://host:port,...` URL benchmarks a cluster.
//! Phases alternate (raw, store, raw, store, ...) so drift hits both alike. One store
//! operation is two round trips (the insert-or-get script, then the complete script); the raw one
//! is one, so 0.5 is the ceiling of the ratio. Every key written is deleted after its phase
//! (keys live under `idemgate-bench:<random>:`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use idemgate_core::fingerprint::{Fingerprint, CURRENT_VERSION};
use idemgate_core::{
    IdempotencyKey, IdempotencyStore, InsertOutcome, InsertRequest, LeaseToken, ScopedKey,
    StoredResponse,
};
use idemgate_redis::RedisStore;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::io::tcp::TcpSettings;
use tokio::time::Instant;

const ROUTE: &str = "POST /payments";
const LEASE: Duration = Duration::from_secs(10);
const TTL: Duration = Duration::from_secs(86_400);

struct Args {
    concurrency: usize,
    seconds: f64,
    rounds: usize,
}

fn args() -> Args {
    let mut out = Args {
        concurrency: 32,
        seconds: 5.0,
        rounds: 2,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_default();
        match flag.as_str() {
            "--concurrency" => out.concurrency = value.parse().expect("--concurrency N"),
            "--seconds" => out.seconds = value.parse().expect("--seconds S"),
            "--rounds" => out.rounds = value.parse().expect("--rounds N"),
            other => panic!("unknown flag {other}; use --concurrency, --seconds, --rounds"),
        }
    }
    out
}

fn stored_response() -> StoredResponse {
    StoredResponse {
        status: 201,
        headers: vec![
            (
                "content-type".into(),
                Bytes::from_static(b"application/json"),
            ),
            ("location".into(), Bytes::from_static(b"/payments/pay_123")),
        ],
        body: Bytes::from(format!(
            r#"{{"id":"pay_123","amount":1000,"currency":"EUR","note":"{}"}}"#,
            "x".repeat(140)
        )),
        replayable: true,
        sealed_by: None,
    }
}

/// The connection both phases share: the same type, the same socket(s).
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Conn {
    async fn open(url: &str) -> Self {
        let nodelay = TcpSettings::default().set_nodelay(true);
        if let Some(hosts) = url.strip_prefix("redis+cluster://") {
            let nodes: Vec<String> = hosts
                .trim_end_matches('/')
                .split(',')
                .map(|h| format!("redis://{h}"))
                .collect();
            let client = redis::cluster::ClusterClientBuilder::new(nodes)
                .tcp_settings(nodelay)
                .build()
                .expect("cluster URLs");
            Self::Cluster(client.get_async_connection().await.expect("connect"))
        } else {
            let client = redis::Client::open(url).expect("URL");
            let config = ConnectionManagerConfig::new()
                .set_response_timeout(Duration::from_secs(2))
                .set_tcp_settings(nodelay);
            Self::Single(
                ConnectionManager::new_with_config(client, config)
                    .await
                    .expect("connect"),
            )
        }
    }

    fn store(&self, prefix: &str) -> RedisStore {
        let store = match self.clone() {
            Self::Single(c) => RedisStore::from_connection_manager(c),
            Self::Cluster(c) => RedisStore::from_cluster_connection(c),
        };
        store.with_key_prefix(prefix).unwrap()
    }

    async fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> T {
        match self {
            Self::Single(c) => cmd.query_async(c).await,
            Self::Cluster(c) => cmd.query_async(c).await,
        }
        .expect("redis command")
    }
}

/// Deletes `keys` in chunks (not timed).
async fn unlink(conn: &Conn, keys: Vec<String>) {
    let mut conn = conn.clone();
    for chunk in keys.chunks(500) {
        let _: i64 = conn.query(redis::cmd("UNLINK").arg(chunk)).await;
    }
}

fn scoped(principal: &str, n: usize) -> ScopedKey {
    ScopedKey {
        principal: principal.to_owned(),
        route: ROUTE.to_owned(),
        key: IdempotencyKey::new(&format!("bench-key-{n:012}")).unwrap(),
    }
}

/// Runs `concurrency` tasks of `op` until `seconds` pass; returns (operations, keys written).
async fn phase<F, Fut>(concurrency: usize, seconds: f64, op: F) -> (u64, Vec<String>)
where
    F: Fn(usize, usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = String> + Send,
{
    let op = Arc::new(op);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let op = op.clone();
            tokio::spawn(async move {
                let mut keys = Vec::new();
                let mut n = 0;
                while Instant::now() < deadline {
                    keys.push(op(task, n).await);
                    n += 1;
                }
                keys
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    (all.len() as u64, all)
}

async fn raw_phase(conn: &Conn, prefix: &str, round: usize, a: &Args) -> f64 {
    let value = Arc::new(stored_response().body.to_vec());
    let (conn2, prefix) = (conn.clone(), prefix.to_owned());
    let started = Instant::now();
    let (ops, keys) = phase(a.concurrency, a.seconds, move |task, n| {
        let (mut conn, value) = (conn2.clone(), value.clone());
        let key = format!("{prefix}raw:{round}:{task}:{n}");
        async move {
            let mut cmd = redis::cmd("SET");
            cmd.arg(&key)
                .arg(&value[..])
                .arg("NX")
                .arg("PX")
                .arg(86_400_000);
            let _: Option<String> = conn.query(&cmd).await;
            key
        }
    })
    .await;
    let rate = ops as f64 / started.elapsed().as_secs_f64();
    unlink(conn, keys).await;
    rate
}

async fn store_phase(conn: &Conn, prefix: &str, round: usize, a: &Args) -> f64 {
    let store = Arc::new(conn.store(prefix));
    let response = Arc::new(stored_response());
    let fingerprint = Fingerprint {
        version: CURRENT_VERSION,
        digest: [7; 32],
    };
    let s = store.clone();
    let started = Instant::now();
    let (ops, keys) = phase(a.concurrency, a.seconds, move |task, n| {
        let (store, response) = (s.clone(), response.clone());
        let key = scoped(&format!("bench-{round}-{task}"), n);
        async move {
            let req = InsertRequest {
                key: key.clone(),
                fingerprint,
                token: LeaseToken::random(),
                lease_ttl: LEASE,
                record_ttl: TTL,
            };
            match store.insert_or_get(&req).await.expect("insert_or_get") {
                InsertOutcome::Inserted(lease) => {
                    store.complete(&lease, &response).await.expect("complete")
                }
                InsertOutcome::Existing { .. } => panic!("fresh keys only"),
            }
            store.record_key(&key)
        }
    })
    .await;
    let rate = ops as f64 / started.elapsed().as_secs_f64();
    unlink(conn, keys).await;
    rate
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let mid = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    }
}

#[tokio::main]
async fn main() {
    let a = args();
    let url = ["IDEMGATE_BENCH_REDIS_URL", "IDEMGATE_TEST_REDIS_URL"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let conn = Conn::open(&url).await;
    let prefix = format!("idemgate-bench:{:08x}:", rand::random::<u32>());
    let kind = match conn {
        Conn::Single(_) => "single node, ConnectionManager",
        Conn::Cluster(_) => "cluster, ClusterConnection",
    };
    println!(
        "idemgate-redis bench: {kind}, concurrency {}, {} s x {} rounds per side",
        a.concurrency, a.seconds, a.rounds
    );
    // warm-up: connections, script loading
    let warm = Args { seconds: 0.5, ..a };
    raw_phase(&conn, &prefix, 0, &warm).await;
    store_phase(&conn, &prefix, 0, &warm).await;

    let (mut raw, mut store) = (Vec::new(), Vec::new());
    for round in 1..=a.rounds {
        let r = raw_phase(&conn, &prefix, round, &a).await;
        let s = store_phase(&conn, &prefix, round, &a).await;
        println!(
            "round {round}: raw SET NX PX {r:>9.0} ops/s | store insert+complete {s:>9.0} ops/s | ratio {:.3}",
            s / r
        );
        raw.push(r);
        store.push(s);
    }
    let (r, s) = (median(raw), median(store));
    println!(
        "median: raw {r:.0} ops/s, store {s:.0} ops/s, ratio {:.3} \
         (per Redis round trip: {:.3}; a store operation is 2 round trips)",
        s / r,
        2.0 * s / r
    );
}
