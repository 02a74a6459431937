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

/// A record written by a release with a fingerprint algorithm this build does not know is
/// never replayed to a request it cannot compare: the answer is a mismatch, and the record
/// is left as it is.
#[tokio::test]
async fn a_record_of_an_unknown_fingerprint_version_is_not_replayed() {
    use idemgate_core::{
        Fingerprint, IdempotencyKey, IdempotencyStore, InsertOutcome, InsertRequest, LeaseToken,
        ScopedKey, StoredResponse,
    };
    use idemgate_tower::{PrincipalSource, RoutePolicy};

    let store = Arc::new(MemoryStore::new());
    let scope = ScopedKey {
        principal: "hdr:alice".into(),
        route: "POST /payments".into(),
        key: IdempotencyKey::new("key-00000003").unwrap(),
    };
    let old = InsertRequest {
        key: scope.clone(),
        fingerprint: Fingerprint {
            version: 99,
            digest: [1; 32],
        },
        token: LeaseToken::random(),
        lease_ttl: std::time::Duration::from_secs(10),
        record_ttl: std::time::Duration::from_secs(3600),
    };
    let InsertOutcome::Inserted(lease) = store.insert_or_get(&old).await.unwrap() else {
        panic!("fresh store");
    };
    let stored = StoredResponse {
        status: 201,
        headers: vec![],
        body: "old".into(),
        replayable: true,
        sealed_by: None,
    };
    store.complete(&lease, &stored).await.unwrap();

    let policy = Policy::default().with_default_route(RoutePolicy::default().with_principal(
        PrincipalSource::Header(http::HeaderName::from_static("x-user")),
    ));
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = IdempotencyLayer::new(store.clone(), policy)
        .layer(failing(calls.clone(), || "unused".into()));
    let req = Request::post("/payments")
        .header("idempotency-key", "key-00000003")
        .header("x-user", "alice")
        .body(full("{}".into()))
        .unwrap();
    let resp = svc.oneshot(req).await.unwrap();
    assert_eq!(resp.status(), 422);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let rec = store.get(&scope).await.unwrap().unwrap();
    assert_eq!(rec.fingerprint.version, 99);
    assert_eq!(rec.response.unwrap().body, "old");
}
