//! The status rules on the layer alone: an upstream `401` with `WWW-Authenticate` (an
//! authentication challenge) releases the key, so the retry after a token refresh runs; a
//! `401` without it is stored and replayed; a route that names `401` keeps its own rule.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use http::{Request, Response, StatusCode};
use idemgate_core::{BoxError, MemoryStore};
use idemgate_tower::body::{full, BoxBody};
use idemgate_tower::{IdempotencyLayer, Policy, RoutePolicy, StatusPattern};
use tower::{service_fn, Layer, ServiceExt};

fn request(key: &str) -> Request<BoxBody> {
    Request::post("/payments")
        .header("idempotency-key", key)
        .header("authorization", "Bearer alice")
        .body(full("{}".into()))
        .unwrap()
}

/// Answers its first call `401` (with `WWW-Authenticate` when `challenge`), later calls
/// `201`; counts calls.
fn expiring_token(
    calls: Arc<AtomicUsize>,
    challenge: bool,
) -> impl tower::Service<
    Request<BoxBody>,
    Response = Response<BoxBody>,
    Error = BoxError,
    Future: Send,
> + Clone
       + Send
       + 'static {
    service_fn(move |_req: Request<BoxBody>| {
        let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
        async move {
            let mut resp = Response::new(full(format!("{{\"call\":{n}}}").into()));
            if n == 1 {
                *resp.status_mut() = StatusCode::UNAUTHORIZED;
                if challenge {
                    let value = "Bearer error=\"invalid_token\"".parse().unwrap();
                    resp.headers_mut().insert("www-authenticate", value);
                }
            } else {
                *resp.status_mut() = StatusCode::CREATED;
            }
            Ok::<_, BoxError>(resp)
        }
    })
}

async fn send<S>(svc: &S, key: &str) -> (StatusCode, bool, String)
where
    S: tower::Service<Request<BoxBody>, Response = Response<BoxBody>, Error = BoxError> + Clone,
{
    use http_body_util::BodyExt;
    let resp = svc.clone().oneshot(request(key)).await.unwrap();
    let replayed = resp.headers().get("idempotent-replayed").is_some();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, replayed, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn a_401_with_a_challenge_releases_the_key() {
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = IdempotencyLayer::new(Arc::new(MemoryStore::new()), Policy::default());
    let svc = layer.layer(expiring_token(calls.clone(), true));
    let first = send(&svc, "key-challenge-1").await;
    assert_eq!(
        first,
        (StatusCode::UNAUTHORIZED, false, r#"{"call":1}"#.into())
    );
    // The client refreshed its token and retries with the same key: it runs.
    let retry = send(&svc, "key-challenge-1").await;
    assert_eq!(retry, (StatusCode::CREATED, false, r#"{"call":2}"#.into()));
    // Its 201 is stored: the next retry replays it.
    let again = send(&svc, "key-challenge-1").await;
    assert_eq!(again, (StatusCode::CREATED, true, r#"{"call":2}"#.into()));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_401_without_a_challenge_is_stored_and_replayed() {
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = IdempotencyLayer::new(Arc::new(MemoryStore::new()), Policy::default());
    let svc = layer.layer(expiring_token(calls.clone(), false));
    let first = send(&svc, "key-no-challenge-1").await;
    assert_eq!(
        first,
        (StatusCode::UNAUTHORIZED, false, r#"{"call":1}"#.into())
    );
    let retry = send(&svc, "key-no-challenge-1").await;
    assert_eq!(
        retry,
        (StatusCode::UNAUTHORIZED, true, r#"{"call":1}"#.into())
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the application's own 401 ran once"
    );
}

#[tokio::test]
async fn a_route_that_names_401_keeps_its_rule() {
    let calls = Arc::new(AtomicUsize::new(0));
    let mut store_statuses = RoutePolicy::default().store_statuses;
    store_statuses.push(StatusPattern::Exact(401));
    let route = RoutePolicy::default().with_store_statuses(store_statuses);
    let policy = Policy::default()
        .with_route("POST /payments", route)
        .unwrap();
    let layer = IdempotencyLayer::new(Arc::new(MemoryStore::new()), policy);
    let svc = layer.layer(expiring_token(calls.clone(), true));
    let first = send(&svc, "key-explicit-401").await;
    assert_eq!(first.0, StatusCode::UNAUTHORIZED);
    let retry = send(&svc, "key-explicit-401").await;
    assert_eq!(
        retry,
        (StatusCode::UNAUTHORIZED, true, r#"{"call":1}"#.into())
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}
