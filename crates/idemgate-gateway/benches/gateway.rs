//! Throughput and latency of POSTs through the gateway vs. straight to the upstream, measured
//! in one run on this machine (load generator, upstream and gateway share the cores).
//!
//! Run: `cargo bench -p idemgate-gateway --bench gateway` (env: `BENCH_SECS`, default 5 per
//! scenario; `BENCH_CONNECTIONS`, default 32). Prints requests/s, p50/p99 latency and the
//! ratios the README quotes, plus the gateway's CPU per request and RSS. When nginx is
//! installed (`NGINX_BIN`, `PATH` or `/usr/sbin`), it then reports the same ratios against an
//! nginx upstream, beside a plain nginx proxy hop, as `scripts/bench/side_by_side.sh` does.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use tokio::net::{TcpListener, TcpStream};

#[path = "support/nginx.rs"]
mod nginx;

/// Connections the upstream accepted: the gateway should reuse a few, not open one per request.
static UPSTREAM_CONNECTIONS: AtomicU64 = AtomicU64::new(0);

const BODY: &str = r#"{"amount":1000,"currency":"EUR","customer":"cus_123"}"#;

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("gateway benchmark: run with `cargo bench -p idemgate-gateway --bench gateway`");
        return;
    }
    let secs: u64 = env_or("BENCH_SECS", 5);
    let conns: usize = env_or("BENCH_CONNECTIONS", 32);
    let upstream = start_upstream();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    println!("# idemgate gateway benchmark: {conns} connections, {secs} s per scenario, 2-core machine shared by load generator, upstream and gateway\n");
    println!("| scenario | requests/s | p50 ms | p99 ms | vs direct |");
    println!("|---|---:|---:|---:|---:|");
    let direct = rt.block_on(load(upstream, conns, secs, Mode::Fresh, "d"));
    row("direct to upstream", &direct, &direct);
    let stores = std::env::var("BENCH_STORES").unwrap_or_else(|_| "sqlite,memory".into());
    for store in stores.split(',') {
        let url = match store {
            "sqlite" => format!("sqlite://{}", dir.path().join("bench.db").display()),
            _ => "memory://".to_owned(),
        };
        let gw = Gateway::start(upstream, &url);
        let cpu_hop = gw.cpu_seconds();
        let hop = rt.block_on(load(gw.addr, conns, secs, Mode::NoKey, store));
        let hop_cpu_us = (gw.cpu_seconds() - cpu_hop) * 1e6 / hop.count as f64;
        row(
            &format!("gateway ({store}), no key: the proxy hop alone ({hop_cpu_us:.0} µs CPU)"),
            &hop,
            &direct,
        );
        let cpu0 = gw.cpu_seconds();
        let fresh = rt.block_on(load(gw.addr, conns, secs, Mode::Fresh, store));
        let cpu_us = (gw.cpu_seconds() - cpu0) * 1e6 / fresh.count as f64;
        row(&format!("gateway ({store}), fresh keys"), &fresh, &direct);
        println!(
            "| upstream connections opened so far | {} | | | |",
            UPSTREAM_CONNECTIONS.load(Ordering::Relaxed)
        );
        let cpu1 = gw.cpu_seconds();
        let replay = rt.block_on(load(gw.addr, conns, secs, Mode::Replay, store));
        let replay_cpu_us = (gw.cpu_seconds() - cpu1) * 1e6 / replay.count as f64;
        row(&format!("gateway ({store}), replays"), &replay, &direct);
        println!("| gateway ({store}) CPU per request | fresh {cpu_us:.0} µs | replay {replay_cpu_us:.0} µs | | |");
        if store == "sqlite" {
            let one_direct = rt.block_on(load(upstream, 1, secs.min(3), Mode::Fresh, "d1"));
            let one_fresh = rt.block_on(load(gw.addr, 1, secs.min(3), Mode::Fresh, "s1"));
            let one_replay = rt.block_on(load(gw.addr, 1, secs.min(3), Mode::Replay, "s1r"));
            println!(
                "| added p50 latency at 1 connection (sqlite) | fresh {:.3} ms | replay {:.3} ms | | |",
                one_fresh.p50 - one_direct.p50,
                one_replay.p50 - one_direct.p50
            );
            let rss = rt.block_on(rss_with_open_connections(&gw, 1024));
            println!("| gateway RSS with 1,024 open connections (sqlite) | {rss:.1} MiB | | | |");
        }
    }
    against_nginx(&rt, conns, secs, &stores, dir.path());
}

/// The rows of `scripts/bench/side_by_side.sh`, when nginx is installed: nginx answering a
/// fixed `201` as the upstream, a plain nginx hop to it, and the gateway on each store in
/// front of it, each as a ratio to nginx called directly.
fn against_nginx(
    rt: &tokio::runtime::Runtime,
    conns: usize,
    secs: u64,
    stores: &str,
    dir: &std::path::Path,
) {
    let Some(nginx) = nginx::Nginx::start() else {
        return;
    };
    println!("\n## against an nginx upstream (fixed `201`), beside a plain nginx proxy hop\n");
    println!("| scenario | requests/s | p50 ms | p99 ms | vs direct |");
    println!("|---|---:|---:|---:|---:|");
    let direct = rt.block_on(load(nginx.upstream, conns, secs, Mode::Fresh, "nd"));
    row("nginx upstream, direct", &direct, &direct);
    let hop = rt.block_on(load(nginx.hop, conns, secs, Mode::Fresh, "nh"));
    row("plain nginx proxy hop, no idempotency", &hop, &direct);
    for store in stores.split(',') {
        let url = match store {
            "sqlite" => format!("sqlite://{}", dir.join("nginx.db").display()),
            _ => "memory://".to_owned(),
        };
        let gw = Gateway::start(nginx.upstream, &url);
        for (mode, what) in [(Mode::Fresh, "fresh keys"), (Mode::Replay, "replays")] {
            let cpu = gw.cpu_seconds();
            let s = rt.block_on(load(gw.addr, conns, secs, mode, &format!("n{store}")));
            let us = (gw.cpu_seconds() - cpu) * 1e6 / s.count as f64;
            row(
                &format!("idemgate ({store}), {what} ({us:.0} µs CPU)"),
                &s,
                &direct,
            );
        }
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Stats {
    count: u64,
    rps: f64,
    p50: f64,
    p99: f64,
}

fn row(name: &str, s: &Stats, direct: &Stats) {
    println!(
        "| {name} | {:.0} | {:.3} | {:.3} | {:.2}x |",
        s.rps,
        s.p50,
        s.p99,
        s.rps / direct.rps
    );
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Every request carries a new key.
    Fresh,
    /// Each connection repeats one key, completed by its first request.
    Replay,
    /// No key: the request passes through (the proxy hop alone).
    NoKey,
}

async fn load(addr: SocketAddr, conns: usize, secs: u64, mode: Mode, tag: &str) -> Stats {
    let seq = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..conns)
        .map(|c| {
            let seq = seq.clone();
            let tag = format!("{tag}-{}-{c}", std::process::id());
            tokio::spawn(async move {
                let stream = TcpStream::connect(addr).await.unwrap();
                stream.set_nodelay(true).unwrap();
                let (mut send, conn) =
                    hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                        .await
                        .unwrap();
                tokio::spawn(conn);
                let mut lat = Vec::with_capacity(100_000);
                let mut warm = mode == Mode::Replay;
                while Instant::now() < deadline {
                    let key = match mode {
                        Mode::Fresh => {
                            format!("bench-{tag}-{}", seq.fetch_add(1, Ordering::Relaxed))
                        }
                        Mode::Replay | Mode::NoKey => format!("bench-replay-{tag}"),
                    };
                    let mut req = Request::post("/payments")
                        .header("host", "bench")
                        .header("authorization", "Bearer bench")
                        .header("content-type", "application/json");
                    if mode != Mode::NoKey {
                        req = req.header("idempotency-key", key);
                    }
                    let req = req
                        .body(Full::new(Bytes::from_static(BODY.as_bytes())))
                        .unwrap();
                    let t = Instant::now();
                    send.ready().await.unwrap();
                    let resp = send.send_request(req).await.unwrap();
                    let status = resp.status();
                    resp.into_body().collect().await.unwrap();
                    assert!(status == 201, "unexpected status {status}");
                    if warm {
                        warm = false;
                        continue;
                    }
                    lat.push(t.elapsed().as_secs_f64() * 1000.0);
                }
                lat
            })
        })
        .collect();
    let started = Instant::now();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
    Stats {
        count: all.len() as u64,
        rps: all.len() as f64 / elapsed,
        p50: pct(0.50),
        p99: pct(0.99),
    }
}

/// A near-free upstream on its own thread: 201 with a fixed JSON body.
fn start_upstream() -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                UPSTREAM_CONNECTIONS.fetch_add(1, Ordering::Relaxed);
                stream.set_nodelay(true).unwrap();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        |req: Request<hyper::body::Incoming>| async move {
                            let _ = req.into_body().collect().await;
                            Ok::<_, Infallible>(
                                Response::builder()
                                    .status(201)
                                    .header("content-type", "application/json")
                                    .header("location", "/payments/pay_1")
                                    .body(Full::new(Bytes::from_static(
                                        br#"{"id":"pay_1","status":"succeeded"}"#,
                                    )))
                                    .unwrap(),
                            )
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
    });
    rx.recv().unwrap()
}

struct Gateway {
    addr: SocketAddr,
    child: Child,
}

impl Gateway {
    fn start(upstream: SocketAddr, store: &str) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["serve", "--admin-listen", ""])
            .args(["--listen", &addr.to_string()])
            .args(["--upstream", &format!("http://{upstream}")])
            .args(["--store", store])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        // Dropping the gateway kills and reaps the process, on every path.
        let gateway = Self { addr, child };
        for _ in 0..200 {
            if std::net::TcpStream::connect(addr).is_ok() {
                return gateway;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("gateway did not start");
    }

    /// User + system CPU time of the gateway process, in seconds.
    fn cpu_seconds(&self) -> f64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        let ticks: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
            + fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
        ticks / 100.0
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn rss_with_open_connections(gw: &Gateway, n: usize) -> f64 {
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(TcpStream::connect(gw.addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", gw.child.id())).unwrap_or_default();
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    drop(held);
    kb / 1024.0
}
