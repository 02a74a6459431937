//! The layer around a plain tower service, on the memory store: how inner errors change the
//! record.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use http::{Request, Response};
use idemgate_core::{BoxError, MemoryStore};
use idemgate_tower::body::{full, BoxBody};
use idemgate_tower::{IdempotencyLayer, NotSent, Policy};
use tower::{service_fn, Layer, ServiceExt};

fn request(key: &str) -> Request<BoxBody> {
    Request::post("/payments")
        .header("idempotency-key", key)
        .header("authorization", "Bearer alice")
        .body(full("{}".into()))
        .unwrap()
}

/// An inner service that fails every call with `make_error`, counting calls.
fn failing(
    calls: Arc<AtomicUsize>,
    make_error: fn() -> BoxError,
) -> impl tower::Service<
    Request<BoxBody>,
    Response = Response<BoxBody>,
    Error = BoxError,
    Future: Send,
> + Clone
       + Send
       + 'static {
    service_fn(move |_req: Request<BoxBody>| {
        calls.fetch_add(1, Ordering::SeqCst);
        async move { Err::<Response<BoxBody>, _>(make_error()) }
    })
}

#[tokio::test]
async fn not_sent_errors_release_the_key() {
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = IdempotencyLayer::new(Arc::new(MemoryStore::new()), Policy::default());
    let svc = layer.layer(failing(calls.clone(), || {
        Box::new(NotSent("connection refused".into()))
    }));
    for _ in 0..2 {
        let err = svc
            .clone()
            .oneshot(request("key-00000001"))
            .await
            .unwrap_err();
        assert!(err.is::<NotSent>());
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2, "a released key runs again");
}

#[tokio::test]
async fn other_errors_fail_the_key() {
    let calls = Arc::new(AtomicUsize::new(0));
    let store = Arc::new(MemoryStore::new());
    let layer = IdempotencyLayer::new(store.clone(), Policy::default());
    let svc = layer.layer(failing(calls.clone(), || {
        "connection reset after sending".into()
    }));
    assert!(svc.clone().oneshot(request("key-00000002")).await.is_err());
    let retry = svc.oneshot(request("key-00000002")).await.unwrap();
    assert_eq!(retry.status(), 500);
    assert_eq!(retry.headers()["content-type"], "application/problem+json");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "a failed key never runs again"
    );
    assert_eq!(store.len(), 1);
}
