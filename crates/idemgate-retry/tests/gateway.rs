//! The retrying client against the real gateway in front of the example payments API and
//! against an upstream of its own: one execution per logical request through timeouts, the
//! stored response at the end, an upstream's own `409` final.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idemgate_gateway::config::{Config, RouteTable};
use idemgate_retry::{IdempotentRetryLayer, RetryPolicy};
use tower::{Service, ServiceBuilder, ServiceExt};

/// A gateway on the memory store in front of `upstream`, `POST /payments` keyed; stopped on
/// drop of the sender.
async fn gateway(upstream: &str) -> (String, tokio::sync::oneshot::Sender<()>) {
    let mut config = Config {
        upstream: upstream.to_owned(),
        store: "memory://".into(),
        ..Config::default()
    };
    config
        .routes
        .push(RouteTable::route("POST /payments").with("key_required", true));
    let validated = idemgate_gateway::cli::validated(config).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(idemgate_gateway::server::run(
        validated,
        listener,
        None,
        async {
            let _ = rx.await;
        },
    ));
    (base, tx)
}

/// The keys and bodies every attempt carried, recorded under the retry layer.
type Seen = Arc<Mutex<Vec<(String, Bytes)>>>;

fn policy(attempt_ms: u64) -> RetryPolicy {
    RetryPolicy {
        attempt_timeout: Duration::from_millis(attempt_ms),
        deadline: Duration::from_secs(20),
        ..RetryPolicy::default()
    }
}

/// hyper-util's client under the retry layer, recording each attempt.
fn hyper_client(
    policy: RetryPolicy,
    seen: Seen,
) -> impl Service<
    http::Request<Full<Bytes>>,
    Response = http::Response<idemgate_retry::RetryBody>,
    Error = idemgate_retry::RetryError,
> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    ServiceBuilder::new()
        .layer(IdempotentRetryLayer::new(policy))
        .map_request(move |req: http::Request<Full<Bytes>>| {
            let key = req.headers()["idempotency-key"]
                .to_str()
                .unwrap()
                .to_owned();
            let body = futures_body(&req);
            seen.lock().unwrap().push((key, body));
            req
        })
        .service(client)
}

/// The bytes of a `Full` body (a single frame, ready at once).
fn futures_body(req: &http::Request<Full<Bytes>>) -> Bytes {
    use futures_util::FutureExt;
    let collected = req.body().clone().collect().now_or_never();
    collected.expect("a full body is ready").unwrap().to_bytes()
}

fn payment(url: &str) -> http::Request<Full<Bytes>> {
    http::Request::post(url)
        .header("authorization", "Bearer alice")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(
            br#"{"amount": 1000, "currency": "EUR"}"#,
        )))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_upstream_short_timeout_runs_once_and_ends_with_the_stored_response() {
    let (api, ledger) = idemgate_demo::payments::spawn().await.unwrap();
    let (gw, _stop) = gateway(&api).await;
    let seen = Seen::default();
    let mut client = hyper_client(policy(300), seen.clone());
    let resp = client
        .ready()
        .await
        .unwrap()
        .call(payment(&format!("{gw}/payments?delay_ms=1500")))
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(resp.headers()["idempotent-replayed"], "true");
    let body: serde_json::Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["id"], "pay_1");
    assert_eq!(ledger.count(), 1, "one execution");
    let seen = seen.lock().unwrap();
    assert!(seen.len() >= 2, "it timed out and retried: {}", seen.len());
    assert!(
        seen.iter().all(|s| *s == seen[0]),
        "the key and body never change"
    );
    assert_eq!(seen[0].0.len(), 36, "a UUID v4 key: {}", seen[0].0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reqwest_through_the_layer_runs_once() {
    let (api, ledger) = idemgate_demo::payments::spawn().await.unwrap();
    let (gw, _stop) = gateway(&api).await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut client = ServiceBuilder::new()
        .layer(IdempotentRetryLayer::new(policy(300)))
        .service(http.clone());
    let request = http
        .post(format!("{gw}/payments?delay_ms=1200"))
        .bearer_auth("bob")
        .json(&serde_json::json!({"amount": 250, "currency": "EUR"}))
        .build()
        .unwrap();
    let resp = client.ready().await.unwrap().call(request).await.unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(resp.headers()["idempotent-replayed"], "true");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["amount"], 250);
    assert_eq!(ledger.count(), 1);
}

/// An upstream answering its own `409` problem (a business conflict), counting executions.
async fn conflicting_upstream() -> (String, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    let app = axum::Router::new().fallback(move || {
        let c = c.clone();
        async move {
            c.fetch_add(1, Ordering::SeqCst);
            (
                StatusCode::CONFLICT,
                [("content-type", "application/problem+json")],
                r#"{"type":"https://api.example.com/problems/request-in-flight","title":"Invoice already paid","status":409}"#,
            )
                .into_response()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstreams_own_409_fresh_or_replayed_is_final() {
    let (api, executions) = conflicting_upstream().await;
    let (gw, _stop) = gateway(&api).await;
    let seen = Seen::default();
    let mut client = hyper_client(policy(2000), seen.clone());
    let mut req = payment(&format!("{gw}/payments"));
    req.headers_mut()
        .insert("idempotency-key", "invoice-42-payment".parse().unwrap());
    let again = {
        let mut r = payment(&format!("{gw}/payments"));
        r.headers_mut()
            .insert("idempotency-key", "invoice-42-payment".parse().unwrap());
        r
    };
    let fresh = client.ready().await.unwrap().call(req).await.unwrap();
    assert_eq!(fresh.status(), 409);
    assert!(fresh.headers().get("idempotent-replayed").is_none());
    let replayed = client.ready().await.unwrap().call(again).await.unwrap();
    assert_eq!(replayed.status(), 409);
    assert_eq!(replayed.headers()["idempotent-replayed"], "true");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2, "one attempt each");
    assert!(
        seen.iter().all(|(k, _)| k == "invoice-42-payment"),
        "a key the caller set is kept"
    );
    assert_eq!(executions.load(Ordering::SeqCst), 1);
}
