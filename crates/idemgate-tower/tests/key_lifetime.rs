//! `RoutePolicy::record_ttl_header` on the layer alone: `Idempotency-Key-Lifetime` on the
//! fresh and the replayed response of a keyed request, not on unkeyed ones.

use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use idemgate_core::{BoxError, MemoryStore};
use idemgate_tower::body::{full, BoxBody};
use idemgate_tower::replay::IDEMPOTENCY_KEY_LIFETIME;
use idemgate_tower::{IdempotencyLayer, Policy, RoutePolicy};
use tower::{service_fn, Layer, ServiceExt};

fn request(key: Option<&str>) -> Request<BoxBody> {
    let mut b = Request::post("/payments").header("authorization", "Bearer alice");
    if let Some(k) = key {
        b = b.header("idempotency-key", k);
    }
    b.body(full("{}".into())).unwrap()
}

#[tokio::test]
async fn fresh_and_replayed_keyed_responses_carry_the_record_ttl() {
    let route = RoutePolicy::default()
        .with_record_ttl(Duration::from_secs(3600))
        .with_record_ttl_header(true);
    let policy = Policy::default()
        .with_route("POST /payments", route)
        .unwrap();
    let layer = IdempotencyLayer::new(Arc::new(MemoryStore::new()), policy);
    let svc = layer.layer(service_fn(|_req: Request<BoxBody>| async {
        let mut resp = Response::new(full("{\"id\":1}".into()));
        *resp.status_mut() = StatusCode::CREATED;
        Ok::<_, BoxError>(resp)
    }));
    let fresh = svc
        .clone()
        .oneshot(request(Some("key-lifetime-1")))
        .await
        .unwrap();
    assert_eq!(fresh.headers()[IDEMPOTENCY_KEY_LIFETIME], "3600");
    let replay = svc
        .clone()
        .oneshot(request(Some("key-lifetime-1")))
        .await
        .unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.headers()[IDEMPOTENCY_KEY_LIFETIME], "3600");
    let unkeyed = svc.oneshot(request(None)).await.unwrap();
    assert!(unkeyed.headers().get(IDEMPOTENCY_KEY_LIFETIME).is_none());
}
