//! A counting upstream, a gateway started in process, and a client.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use idemgate_gateway::config::Config;
use tokio::sync::oneshot;

pub(crate) mod key_service;
mod python;
mod relay;
pub(crate) use python::{data, output_within, python, text};
pub(crate) use relay::Relay;

/// An upstream that counts every request it receives and answers per query parameters:
/// `status=N`, `delay_ms=N` (before answering), `bytes=N` (body size), `stream=1`
/// (`text/event-stream`), `broken=1` (body breaks off after its first chunk), `headers=N`
/// (`N` more headers, `x-h-0: v0` to `x-h-{N-1}`), `first_status=N` (the upstream's first
/// execution answers `N` instead), `status_seq=a,b,..` and `delay_ms_seq=a,b,..` (the n-th
/// execution's, the last one after), `retry_after=S` and `retry_after_seq` (a `Retry-After: S` header),
/// `challenge=1` (a `401` carries `WWW-Authenticate`), `reserved=1` (`Idempotent-Redacted`,
/// `Idempotent-Body-Omitted` and `Idempotent-Replayed`, reserved for idemgate).
#[derive(Clone)]
pub(crate) struct Upstream {
    pub(crate) base: String,
    pub(crate) executions: Arc<AtomicUsize>,
    pub(crate) last_headers: Arc<Mutex<Option<HeaderMap>>>,
}

impl Upstream {
    pub(crate) fn count(&self) -> usize {
        self.executions.load(Ordering::SeqCst)
    }

    pub(crate) fn last_headers(&self) -> HeaderMap {
        self.last_headers
            .lock()
            .unwrap()
            .clone()
            .expect("upstream saw a request")
    }
}

pub(crate) async fn upstream() -> Upstream {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = Upstream {
        base: format!("http://{}", listener.local_addr().unwrap()),
        executions: Arc::default(),
        last_headers: Arc::default(),
    };
    let app = Router::new().fallback(handler).with_state(up.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    up
}

async fn handler(
    State(up): State<Upstream>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let n = up.executions.fetch_add(1, Ordering::SeqCst) + 1;
    *up.last_headers.lock().unwrap() = Some(headers);
    let num = |k: &str| q.get(k).and_then(|v| v.parse::<u64>().ok());
    // `K_seq=a,b,...`: the n-th execution's value (the last one past the end), else `K`.
    let nth = |k: &str| {
        let seq = q.get(&format!("{k}_seq"))?.split(',').collect::<Vec<_>>();
        seq.get(n - 1).or(seq.last())?.parse::<u64>().ok()
    };
    if let Some(ms) = nth("delay_ms").or(num("delay_ms")) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let status = match num("first_status") {
        Some(first) if n == 1 => first,
        _ => nth("status").or(num("status")).unwrap_or(201),
    };
    let status = StatusCode::from_u16(status as u16).unwrap();
    if q.contains_key("stream") {
        let events = futures_util::stream::iter(
            (0..3).map(|i| Ok::<_, std::io::Error>(Bytes::from(format!("data: event {i}\n\n")))),
        );
        return (
            [("content-type", "text/event-stream")],
            Body::from_stream(events),
        )
            .into_response();
    }
    if q.contains_key("broken") {
        // The headers and a first chunk go out; 100 ms later the body breaks off.
        let chunks = futures_util::stream::unfold(0, |i| async move {
            match i {
                0 => Some((Ok(Bytes::from_static(b"{\"partial\":")), 1)),
                1 => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Some((Err(std::io::Error::other("upstream died mid-body")), 2))
                }
                _ => None,
            }
        });
        return (status, Body::from_stream(chunks)).into_response();
    }
    let body = match num("bytes") {
        Some(len) => Bytes::from(vec![b'x'; len as usize]),
        None => Bytes::from(
            serde_json::to_vec(&serde_json::json!({
                "execution": n,
                "received": String::from_utf8_lossy(&body),
            }))
            .unwrap(),
        ),
    };
    let mut extra = HeaderMap::new();
    for i in 0..num("headers").unwrap_or(0) {
        let name = axum::http::HeaderName::try_from(format!("x-h-{i}")).unwrap();
        extra.insert(name, format!("v{i}").parse().unwrap());
    }
    if let Some(v) = nth("retry_after").or(num("retry_after")) {
        extra.insert(axum::http::header::RETRY_AFTER, v.into());
    }
    if q.contains_key("reserved") {
        for name in [
            "idempotent-redacted",
            "idempotent-body-omitted",
            "idempotent-replayed",
        ] {
            extra.insert(name, "true".parse().unwrap());
        }
    }
    if q.contains_key("challenge") && status == StatusCode::UNAUTHORIZED {
        let challenge = "Bearer error=\"invalid_token\"".parse().unwrap();
        extra.insert(axum::http::header::WWW_AUTHENTICATE, challenge);
    }
    (
        status,
        extra,
        [
            ("content-type", "application/json"),
            ("location", "/payments/pay_1"),
            ("etag", "\"v1\""),
            ("set-cookie", "session=secret; HttpOnly"),
            ("x-upstream", "yes"),
        ],
        body,
    )
        .into_response()
}

/// A gateway running in this process.
pub(crate) struct Gateway {
    pub(crate) base: String,
    pub(crate) admin: String,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    /// What must live as long as the gateway (e.g. the key service behind it).
    kept: Vec<Box<dyn std::any::Any + Send>>,
}

impl Gateway {
    /// Keeps `thing` alive until the gateway is dropped.
    pub(crate) fn keep(&mut self, thing: Box<dyn std::any::Any + Send>) {
        self.kept.push(thing);
    }

    /// Stops the gateway and waits until it has drained.
    pub(crate) async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(10), &mut self.task)
            .await
            .expect("gateway stops")
            .unwrap()
            .unwrap();
    }
}

/// Starts a gateway in front of `upstream` on `store`, after `edit` adjusts its config.
pub(crate) async fn gateway(
    upstream: &str,
    store: &str,
    edit: impl FnOnce(&mut Config),
) -> Gateway {
    let mut config = Config {
        upstream: upstream.to_owned(),
        store: store.to_owned(),
        ..Config::default()
    };
    edit(&mut config);
    let config = idemgate_gateway::cli::validated(config).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let admin_base = format!("http://{}", admin.local_addr().unwrap());
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(idemgate_gateway::server::run(
        config,
        listener,
        Some(admin),
        async {
            let _ = rx.await;
        },
    ));
    Gateway {
        base,
        admin: admin_base,
        stop: Some(tx),
        task,
        kept: Vec::new(),
    }
}

/// A gateway on the in-memory store with default policy.
pub(crate) async fn memory_gateway(upstream: &Upstream) -> Gateway {
    gateway(&upstream.base, "memory://", |_| {}).await
}

pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

pub(crate) fn key() -> String {
    format!("test-{:016x}", rand_u64())
}

pub(crate) fn rand_u64() -> u64 {
    rand::random()
}

/// A POST as user alice, with `key` if given, a JSON body.
pub(crate) fn post(
    base: &str,
    path: &str,
    key: Option<&str>,
    body: &str,
) -> reqwest::RequestBuilder {
    let mut rb = client()
        .post(format!("{base}{path}"))
        .header("authorization", "Bearer alice")
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(k) = key {
        rb = rb.header("idempotency-key", k);
    }
    rb
}

/// Asserts a problem+json answer with `status` whose type points at `#anchor`.
pub(crate) async fn assert_problem(
    resp: reqwest::Response,
    status: u16,
    anchor: &str,
) -> serde_json::Value {
    assert_eq!(resp.status().as_u16(), status);
    assert_eq!(resp.headers()["content-type"], "application/problem+json");
    let body: serde_json::Value = resp.json().await.unwrap();
    let ty = body["type"].as_str().unwrap();
    assert_eq!(ty, format!("urn:idemgate:problem:{anchor}"));
    assert_eq!(body["status"], status);
    assert!(body["title"].is_string() && body["detail"].is_string());
    body
}

/// A gateway process (the real `idemgate` binary), killed on drop.
pub(crate) struct Process {
    pub(crate) child: std::process::Child,
    pub(crate) base: String,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `idemgate serve` on `listen` with `config`, once it accepts connections.
pub(crate) async fn spawn_binary_on(
    listen: &str,
    upstream: &str,
    config: &std::path::Path,
) -> Process {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args([
            "serve",
            "--listen",
            listen,
            "--admin-listen",
            "",
            "--upstream",
            upstream,
        ])
        .arg("--config")
        .arg(config)
        .stdout(std::process::Stdio::null())
        .stderr(match std::env::var_os("IDEMGATE_TEST_GATEWAY_STDERR") {
            Some(_) => std::process::Stdio::inherit(),
            None => std::process::Stdio::null(),
        })
        .spawn()
        .unwrap();
    let process = Process {
        child,
        base: format!("http://{listen}"),
    };
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(listen).await.is_ok() {
            return process;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the gateway did not start");
}

/// [`spawn_binary_on`] on a free port.
pub(crate) async fn spawn_binary(upstream: &str, config: &std::path::Path) -> Process {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    spawn_binary_on(&format!("127.0.0.1:{port}"), upstream, config).await
}

/// POSTs one fresh key every 250 ms (10 s at most) until it is not refused any more;
/// returns the last status.
pub(crate) async fn status_once_recovered(base: &str) -> u16 {
    let k = key();
    let mut status = 0;
    for _ in 0..40 {
        status = post(base, "/payments", Some(&k), "{}")
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        if status == 201 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    status
}

/// The URL of a test service from `var`, or `None` after printing why the test skips.
pub(crate) fn test_url(var: &str) -> Option<String> {
    let url = std::env::var(var).ok();
    if url.is_none() {
        println!("skipping: {var} is not set");
    }
    url
}

/// Runs the `idemgate` binary with `args` (at `RUST_LOG=info`); its exit code and its
/// standard output followed by its standard error.
pub(crate) fn run_idemgate<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(args)
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

/// Deletes every Redis key under `prefix` (a test's own).
/// The field values of every record hash under `prefix`, concatenated as stored (`HGETALL`;
/// `DUMP` would compress long strings and hide what a value holds).
pub(crate) async fn redis_values(url: &str, prefix: &str) -> Vec<u8> {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut values = Vec::new();
    for k in &keys {
        let fields: Vec<Vec<u8>> = redis::cmd("HGETALL")
            .arg(k)
            .query_async(&mut conn)
            .await
            .unwrap_or_default();
        values.extend(fields.into_iter().flatten());
    }
    values
}

pub(crate) async fn delete_redis_prefix(url: &str, prefix: &str) {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL")
            .arg(&keys)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

/// Drops a PostgreSQL records table, its migrations table and its failovers table (a test's
/// own).
pub(crate) async fn drop_pg_table(url: &str, table: &str) {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    let sql = format!("DROP TABLE IF EXISTS {table}, {table}_migrations, {table}_failovers");
    sqlx::query(&sql).execute(&pool).await.unwrap();
}

/// The Prometheus text of `base` (`http://host:port` of an admin listener), asserting `200`.
pub(crate) async fn scrape(base: &str) -> String {
    let resp = client()
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.text().await.unwrap()
}
