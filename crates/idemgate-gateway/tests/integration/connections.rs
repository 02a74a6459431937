//! Bounded connections (issue 27): slow and silent clients are cut off at
//! `header_read_timeout` with `408` while others are served; a stalled body is `408` and a
//! covered one stores and forwards nothing; kept-alive connections wait `idle_timeout`; past
//! `max_connections` new clients wait in the backlog and are served as connections free up,
//! none reset; the key service's and admin listeners have the same timeouts.
//! Bounds are generous (the machine is shared): "within the timeout + 2 s".

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use futures_util::future::join_all;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::support::key_service::{config_text, free_addr, wait_for};
use crate::support::*;

const HALF_HEAD: &[u8] = b"POST /v1/x HTTP/1.1\r\nHost: x\r\n";

fn addr(base: &str) -> String {
    base.trim_start_matches("http://").to_owned()
}

/// What a connection reads until the server closes it (or fails, or 30 s pass), and when
/// that happened after `since`.
async fn until_closed(tcp: &mut TcpStream, since: Instant) -> (String, Duration) {
    let mut read = Vec::new();
    let done = tokio::time::timeout(Duration::from_secs(30), tcp.read_to_end(&mut read)).await;
    let closed = since.elapsed();
    assert!(matches!(done, Ok(Ok(_))), "not closed cleanly: {done:?}");
    (String::from_utf8_lossy(&read).into_owned(), closed)
}

/// This process's count of `timeout` closes on service listeners (every in-process
/// gateway of the test binary adds to it).
fn timeouts(timeout: &str) -> f64 {
    let metrics = idemgate_gateway::telemetry::prometheus().unwrap().render();
    let series = format!(
        "idempotency_connection_timeouts_total{{listener=\"service\",timeout=\"{timeout}\"}} "
    );
    let value = metrics.lines().find_map(|l| l.strip_prefix(&series));
    value.map_or(0.0, |v| v.parse().unwrap())
}

fn assert_request_timeout(answer: &str) {
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    assert!(
        answer.contains("urn:idemgate:problem:request-timeout"),
        "{answer}"
    );
}

/// A slow client: connects, sends half a request head (`half`) or nothing, then waits for
/// the gateway to close; returns what it got and how long after connecting.
async fn slow_client(addr: String, half: bool) -> (String, Duration) {
    let mut tcp = TcpStream::connect(&addr).await.unwrap();
    let since = Instant::now();
    if half {
        tcp.write_all(HALF_HEAD).await.unwrap();
    }
    until_closed(&mut tcp, since).await
}

/// A gateway in this process (memory store, `header_read_timeout = "2s"`) on a listener
/// bound as `serve` binds it: its backlog holds 400 clients connecting at once (the standard
/// library's 128 would drop the handshakes of silent ones). Stops when `stop` is sent.
async fn backlogged_gateway(upstream: &str) -> (String, tokio::sync::oneshot::Sender<()>) {
    let config = idemgate_gateway::config::Config {
        upstream: upstream.to_owned(),
        store: "memory://".into(),
        header_read_timeout: "2s".into(),
        ..Default::default()
    };
    let config = idemgate_gateway::cli::validated(config).unwrap();
    let listener = idemgate_gateway::connections::bind(([127, 0, 0, 1], 0).into()).unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let stopped = async {
        let _ = stopped.await;
    };
    tokio::spawn(idemgate_gateway::server::run(
        config, listener, None, stopped,
    ));
    (base, stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_silent_clients_are_closed_and_others_are_served_meanwhile() {
    let timeout = Duration::from_secs(2);
    let up = upstream().await;
    let (base, stop) = backlogged_gateway(&up.base).await;
    let closed = Arc::new(AtomicUsize::new(0));
    let slow: Vec<_> = (0..400)
        .map(|i| {
            let (addr, closed) = (addr(&base), closed.clone());
            tokio::spawn(async move {
                let got = slow_client(addr, i % 2 == 0).await;
                closed.fetch_add(1, Ordering::SeqCst);
                got
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let k = key();
    let resp = post(&base, "/payments", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let before = closed.load(Ordering::SeqCst);
    assert_eq!(before, 0, "answered before any slow client was cut off");
    for (i, got) in join_all(slow).await.into_iter().enumerate() {
        let (answer, after) = got.unwrap();
        assert!(after <= timeout + Duration::from_secs(2), "{i}: {after:?}");
        assert_request_timeout(&answer);
    }
    assert_eq!(up.count(), 1);
    assert!(timeouts("header") >= 400.0, "{}", timeouts("header"));
    let _ = stop.send(());
}

/// A covered `POST /payments` with `key` announcing 20 body bytes and sending 8.
fn stalled_post(key: &str) -> String {
    format!(
        "POST /payments HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer alice\r\n\
         idempotency-key: {key}\r\ncontent-type: application/json\r\ncontent-length: 20\r\n\r\n\
         {{\"amount"
    )
}

#[tokio::test]
async fn a_stalled_covered_body_is_408_and_stores_and_forwards_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("gw.db").display());
    let up = upstream().await;
    let gw = gateway(&up.base, &store, |c| c.body_read_timeout = "1s".into()).await;
    let k = key();
    let mut tcp = TcpStream::connect(addr(&gw.base)).await.unwrap();
    tcp.write_all(stalled_post(&k).as_bytes()).await.unwrap();
    let (answer, after) = until_closed(&mut tcp, Instant::now()).await;
    assert_request_timeout(&answer);
    assert!(answer.contains("connection: close"), "{answer}");
    assert!(after <= Duration::from_secs(3), "{after:?}");
    assert_eq!(up.count(), 0, "nothing was forwarded");
    assert!(timeouts("body") >= 1.0);
    // Nothing was stored: the retry runs (no replay, no 409, no failed record), once.
    let body = "{\"amount\": 100, \"x\": 1}";
    let retry = post(&gw.base, "/payments", Some(&k), body)
        .send()
        .await
        .unwrap();
    assert_eq!(retry.status(), 201);
    assert!(!retry.headers().contains_key("idempotent-replayed"));
    let again = post(&gw.base, "/payments", Some(&k), body)
        .send()
        .await
        .unwrap();
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(up.count(), 1, "the operation ran once");
    gw.stop().await;
}

#[tokio::test]
async fn a_stalled_body_without_a_key_is_408_too() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |c| c.body_read_timeout = "1s".into()).await;
    let head = "POST /payments HTTP/1.1\r\nhost: gw\r\ncontent-length: 20\r\n\r\n{\"a";
    let mut tcp = TcpStream::connect(addr(&gw.base)).await.unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    let (answer, after) = until_closed(&mut tcp, Instant::now()).await;
    assert_request_timeout(&answer);
    assert!(after <= Duration::from_secs(3), "{after:?}");
    gw.stop().await;
}

/// One request on a kept-alive connection; the status line of its answer (read to the end
/// of its `Content-Length` body).
async fn exchange(tcp: &mut TcpStream) -> String {
    let request = "GET /status HTTP/1.1\r\nhost: gw\r\n\r\n";
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8];
        assert_eq!(tcp.read(&mut byte).await.unwrap(), 1, "closed mid-answer");
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .expect("a content-length")
        .parse()
        .unwrap();
    tcp.read_exact(&mut vec![0; length]).await.unwrap();
    head.lines().next().unwrap().to_owned()
}

/// Between requests a connection waits `idle_timeout` (here longer than
/// `header_read_timeout`), then is closed without an answer.
#[tokio::test]
async fn a_kept_alive_connection_waits_idle_timeout_then_closes_silently() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |c| {
        c.header_read_timeout = "1s".into();
        c.idle_timeout = "5s".into();
    })
    .await;
    let mut tcp = TcpStream::connect(addr(&gw.base)).await.unwrap();
    assert_eq!(exchange(&mut tcp).await, "HTTP/1.1 201 Created");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(exchange(&mut tcp).await, "HTTP/1.1 201 Created");
    let (answer, after) = until_closed(&mut tcp, Instant::now()).await;
    assert_eq!(answer, "", "closed without an answer");
    assert!(after <= Duration::from_secs(7), "{after:?}");
    gw.stop().await;
}

/// An upstream that answers `201` after 300 ms and keeps the most requests it ever had in
/// flight at once.
async fn counting_upstream() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (now, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let seen = peak.clone();
    let app = Router::new().fallback(move || {
        let (now, peak) = (now.clone(), peak.clone());
        async move {
            peak.fetch_max(now.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(300)).await;
            now.fetch_sub(1, Ordering::SeqCst);
            (http::StatusCode::CREATED, "{}")
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, seen)
}

/// One value of the `idempotency_connections_*` series of `listener="service"`.
fn service_sample(metrics: &str, name: &str) -> Option<f64> {
    let prefix = format!("{name}{{listener=\"service\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.parse().ok())
}

/// A client of its own connection: a covered POST, `Connection: close`; its whole answer.
async fn one_client(addr: String) -> String {
    let mut tcp = TcpStream::connect(&addr).await.unwrap();
    let request = format!(
        "POST /payments HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer alice\r\n\
         idempotency-key: {}\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}",
        key()
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    until_closed(&mut tcp, Instant::now()).await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_connections_clients_wait_and_are_all_served() {
    let (upstream, peak) = counting_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (listen, admin) = (free_addr(), free_addr());
    let config = dir.path().join("gw.toml");
    let db = dir.path().join("gw.db");
    let text = format!(
        "listen = \"{listen}\"\nadmin_listen = \"{admin}\"\nupstream = \"{upstream}\"\n\
         store = \"sqlite://{}\"\nmax_connections = 100\n",
        db.display()
    );
    std::fs::write(&config, text).unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["serve", "--config"])
        .arg(&config)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _gw = Process {
        child,
        base: format!("http://{listen}"),
    };
    wait_for(&admin).await;
    wait_for(&listen).await;
    let admin = format!("http://{admin}");
    let done = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..300)
        .map(|_| {
            let (addr, done) = (listen.clone(), done.clone());
            tokio::spawn(async move {
                let answer = one_client(addr).await;
                done.fetch_add(1, Ordering::SeqCst);
                answer
            })
        })
        .collect();
    let mut most_open = 0f64;
    while done.load(Ordering::SeqCst) < 300 {
        let open = service_sample(&scrape(&admin).await, "idempotency_connections_open");
        most_open = most_open.max(open.unwrap_or(0.0));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for answer in join_all(clients).await {
        let answer = answer.unwrap();
        assert!(answer.starts_with("HTTP/1.1 201 "), "{answer}");
    }
    assert!(most_open <= 100.0, "{most_open} connections open");
    let peak = peak.load(Ordering::SeqCst);
    assert!(
        (1..=100).contains(&peak),
        "{peak} requests in flight at once"
    );
    let metrics = scrape(&admin).await;
    let reached = service_sample(&metrics, "idempotency_connections_limit_reached_total");
    assert!(reached.is_some_and(|n| n >= 1.0), "{metrics}");
}

/// The key service's listener and the admin listener cut off half a head the same way.
#[tokio::test]
async fn the_key_service_and_admin_listeners_time_out_slow_heads() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("ks.db").display());
    let text = config_text(&store, "127.0.0.1:0", "header_read_timeout = \"1s\"");
    let config = idemgate_gateway::config::Config::from_toml(&text).unwrap();
    let config = idemgate_gateway::key_service::resolve(config, &mut Vec::new()).unwrap();
    let base = &config.base;
    let opened = idemgate_gateway::store::open(&base.store, &base.store_options).await;
    let store = Arc::new(opened.unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addrs = [listener.local_addr().unwrap(), admin.local_addr().unwrap()];
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let stopped = async {
        let _ = stopped.await;
    };
    let run = idemgate_gateway::key_service::run(config, store, listener, Some(admin), stopped);
    let task = tokio::spawn(run);
    for addr in addrs {
        let (answer, after) = slow_client(addr.to_string(), true).await;
        assert_request_timeout(&answer);
        assert!(after <= Duration::from_secs(3), "{addr}: {after:?}");
    }
    let _ = stop.send(());
    let stopped = tokio::time::timeout(Duration::from_secs(10), task).await;
    stopped.expect("the key service stops").unwrap().unwrap();
}
