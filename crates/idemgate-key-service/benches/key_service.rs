//! acquire + complete per second through the key service (HTTP/JSON, `idemgate-client`)
//! vs. the same work on the same kind of store called directly (the core lifecycle's
//! `begin` + the store's `complete`), at 32 concurrent callers. Run on purpose, never in CI:
//!
//! ```text
//! cargo bench -p idemgate-key-service --bench key_service            # SQLite
//! IDEMGATE_BENCH_SECONDS=5 IDEMGATE_BENCH_ROUNDS=3 ...               # per-round length, rounds
//! ```
//!
//! Callers, service and store share this process and the machine's cores, as a load
//! generator, a key service and its callers would on one host, with the allocator of the
//! `idemgate` binary (jemalloc). Each round alternates the
//! two ways on fresh stores; the medians are printed with their ratio.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use idemgate_client::wire::{AcquireRequest, AcquireResponse, CompleteRequest, ResponseParts};
use idemgate_client::KeyServiceClient;
use idemgate_core::lifecycle::{Begin, RoutePlan};
use idemgate_core::{
    Fingerprint, IdempotencyKey, IdempotencyStore, Lifecycle, ScopedKey, StoredResponse,
};
use idemgate_key_service::{KeyService, KeyServiceConfig};
use idemgate_sqlite::{SqliteOptions, SqliteStore};

/// The allocator the `idemgate` binary runs the key service with.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const CALLERS: usize = 32;
const TOKEN: &str = "bench-token-0123456789";

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `CALLERS` loops of `op` for `secs`; returns operations per second.
async fn drive<F, Fut>(secs: u64, op: F) -> f64
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let seq = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..CALLERS)
        .map(|_| {
            let (op, stop, done, seq) = (op.clone(), stop.clone(), done.clone(), seq.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    op(seq.fetch_add(1, Ordering::Relaxed)).await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

fn response() -> StoredResponse {
    StoredResponse {
        status: 201,
        headers: vec![("content-type".into(), "application/json".into())],
        body: bytes::Bytes::from_static(br#"{"id":"pay_1","status":"ok"}"#),
        replayable: true,
        sealed_by: None,
    }
}

async fn direct<St: IdempotencyStore>(store: Arc<St>, secs: u64, run: u64) -> f64 {
    let lifecycle = Lifecycle::new(store.clone(), Default::default());
    drive(secs, move |n| {
        let (lifecycle, store) = (lifecycle.clone(), store.clone());
        async move {
            let key = ScopedKey {
                principal: "ns:bench:user-42".into(),
                route: "POST /payments".into(),
                key: IdempotencyKey::new(&format!("direct-{run}-{n:012}")).unwrap(),
            };
            let fp = Fingerprint {
                version: 2,
                digest: [7; 32],
            };
            let plan = RoutePlan::default();
            let Begin::Run(holder) = lifecycle.begin(&key, fp, &plan, |_| async { None }).await
            else {
                panic!("a fresh key runs")
            };
            store.complete(&holder.lease, &response()).await.unwrap();
        }
    })
    .await
}

async fn service<St: IdempotencyStore>(store: Arc<St>, secs: u64, run: u64) -> f64 {
    let mut config = KeyServiceConfig::default();
    config.clients.push(idemgate_key_service::ClientConfig {
        name: "bench".into(),
        namespace: "bench".into(),
        token_sha256: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(TOKEN)),
        ..Default::default()
    });
    let settings = config.validate().unwrap();
    let app = idemgate_key_service::router(KeyService::new(
        Lifecycle::new(store, Default::default()),
        &settings,
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // As the binary does: answers go out as soon as they are written.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let client = KeyServiceClient::new(&format!("idemgate://{addr}"))
        .unwrap()
        .with_token(TOKEN);
    let parts = ResponseParts {
        status: 201,
        headers: vec![("content-type".into(), "application/json".into())],
        body_base64: "eyJpZCI6InBheV8xIiwic3RhdHVzIjoib2sifQ==".into(),
    };
    let rate = drive(secs, move |n| {
        let (client, parts) = (client.clone(), parts.clone());
        async move {
            let key = format!("service-{run}-{n:012}");
            let req = AcquireRequest {
                scope: "POST /payments".into(),
                principal: "user-42".into(),
                key: key.clone(),
                fingerprint: Some("amount=10;currency=EUR".into()),
                ..Default::default()
            };
            let AcquireResponse::Run { lease, .. } = client.acquire(&req).await.unwrap() else {
                panic!("a fresh key runs")
            };
            let done = CompleteRequest {
                scope: req.scope,
                principal: req.principal,
                key,
                lease: lease.into(),
                response: parts,
            };
            client.complete(&done).await.unwrap();
        }
    })
    .await;
    server.abort();
    rate
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

async fn round(secs: u64, run: u64) -> (f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = |name: &str| {
        Arc::new(SqliteStore::open(dir.path().join(name), SqliteOptions::default()).unwrap())
    };
    (
        direct(sqlite("direct.db"), secs, run).await,
        service(sqlite("service.db"), secs, run).await,
    )
}

fn main() {
    // `cargo test --all-targets` runs bench targets too; only `cargo bench` measures.
    if !std::env::args().any(|a| a == "--bench") {
        println!("key service benchmark: run with `cargo bench -p idemgate-key-service --bench key_service`");
        return;
    }
    let secs = env("IDEMGATE_BENCH_SECONDS", 5);
    let rounds = env("IDEMGATE_BENCH_ROUNDS", 3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (mut d, mut s) = (Vec::new(), Vec::new());
    for run in 0..rounds {
        let (direct, service) = rt.block_on(round(secs, run));
        println!("round {run}: direct {direct:.0}/s, key service {service:.0}/s");
        d.push(direct);
        s.push(service);
    }
    let (d, s) = (median(d), median(s));
    println!(
        "sqlite store, {CALLERS} callers, acquire+complete: direct {d:.0}/s, through the key service {s:.0}/s, ratio {:.2}x",
        s / d
    );
}
