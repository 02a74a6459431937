//! A holder that died after forwarding: what its retries get, per `lease_expired` policy.
//! Memory store under a paused tokio clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use idemgate_core::engine::LeaseExpiredPolicy;
use idemgate_core::testing::{damage_memory, Damage};
use idemgate_core::{IdempotencyKey, IdempotencyStore, InsertOutcome, InsertRequest, LeaseToken};
use idemgate_core::{MemoryStore, ScopedKey};
use idemgate_tower::body::{full, BoxBody};
use idemgate_tower::{IdempotencyLayer, LeaseHandle, Policy, PrincipalSource, RoutePolicy};
use tower::{service_fn, Layer, ServiceExt};

const KEY: &str = "key-lapsed-0001";

fn policy(lease_expired: LeaseExpiredPolicy) -> Policy {
    Policy::default().with_default_route(
        RoutePolicy::default()
            .with_principal(PrincipalSource::Header(http::HeaderName::from_static(
                "x-user",
            )))
            .with_lease_expired(lease_expired),
    )
}

fn request() -> Request<BoxBody> {
    Request::post("/payments")
        .header("idempotency-key", KEY)
        .header("x-user", "alice")
        .header("idempotent-takeover", "true") // forged: must never reach the service
        .body(full("{}".into()))
        .unwrap()
}

/// What the inner service saw: the takeover header, and the lease handle's flag.
type Seen = Arc<Mutex<Vec<(Option<String>, bool)>>>;

/// The layer over a service that records what it saw and answers `201`.
async fn call(store: Arc<MemoryStore>, p: Policy, seen: Seen) -> Response<BoxBody> {
    let svc = service_fn(move |req: Request<BoxBody>| {
        let header = req
            .headers()
            .get("idempotent-takeover")
            .map(|v| v.to_str().unwrap().to_owned());
        let takeover = req
            .extensions()
            .get::<LeaseHandle>()
            .is_some_and(LeaseHandle::is_takeover);
        seen.lock().unwrap().push((header, takeover));
        async {
            Ok::<_, std::convert::Infallible>(
                Response::builder()
                    .status(201)
                    .body(full("paid".into()))
                    .unwrap(),
            )
        }
    });
    IdempotencyLayer::new(store, p)
        .layer(svc)
        .oneshot(request())
        .await
        .unwrap()
}

/// A record left `in_progress` by a gateway that died after forwarding, its lease lapsed.
async fn crashed_holder() -> Arc<MemoryStore> {
    let store = Arc::new(MemoryStore::new());
    let scope = ScopedKey {
        principal: "hdr:alice".into(),
        route: "POST /payments".into(),
        key: IdempotencyKey::new(KEY).unwrap(),
    };
    let fingerprint = fingerprint_of_request().await;
    let req = InsertRequest {
        key: scope,
        fingerprint,
        token: LeaseToken::random(),
        lease_ttl: Duration::from_secs(10),
        record_ttl: Duration::from_secs(3600),
    };
    assert!(matches!(
        store.insert_or_get(&req).await.unwrap(),
        InsertOutcome::Inserted(_)
    ));
    tokio::time::sleep(Duration::from_secs(11)).await;
    store
}

/// Runs `request()` once on a fresh store and reads the fingerprint the layer stored.
async fn fingerprint_of_request() -> idemgate_core::Fingerprint {
    let store = Arc::new(MemoryStore::new());
    call(
        store.clone(),
        policy(LeaseExpiredPolicy::Unknown),
        Seen::default(),
    )
    .await;
    let scope = ScopedKey {
        principal: "hdr:alice".into(),
        route: "POST /payments".into(),
        key: IdempotencyKey::new(KEY).unwrap(),
    };
    store.get(&scope).await.unwrap().unwrap().fingerprint
}

#[tokio::test(start_paused = true)]
async fn by_default_a_lapsed_lease_answers_outcome_unknown_and_never_runs_again() {
    let store = crashed_holder().await;
    let seen = Seen::default();
    for _ in 0..3 {
        let resp = call(
            store.clone(),
            policy(LeaseExpiredPolicy::Unknown),
            seen.clone(),
        )
        .await;
        assert_eq!(resp.status(), 500);
        assert_eq!(resp.headers()["content-type"], "application/problem+json");
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap()
            .to_bytes();
        let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert!(
            problem["type"]
                .as_str()
                .unwrap()
                .ends_with(":outcome-unknown"),
            "{problem}"
        );
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "the operation never ran again"
    );
}

#[tokio::test(start_paused = true)]
async fn with_takeover_the_service_is_told_and_forged_markers_are_stripped() {
    let store = crashed_holder().await;
    let seen = Seen::default();
    let resp = call(
        store.clone(),
        policy(LeaseExpiredPolicy::Takeover),
        seen.clone(),
    )
    .await;
    assert_eq!(resp.status(), 201);
    let fresh = call(
        Arc::new(MemoryStore::new()),
        policy(LeaseExpiredPolicy::Takeover),
        seen.clone(),
    )
    .await;
    assert_eq!(fresh.status(), 201);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen, vec![(Some("true".into()), true), (None, false)]);
}

#[tokio::test(start_paused = true)]
async fn a_damaged_record_answers_record_corrupt_never_a_replay() {
    let store = Arc::new(MemoryStore::new());
    let seen = Seen::default();
    let p = || policy(LeaseExpiredPolicy::Unknown);
    assert_eq!(call(store.clone(), p(), seen.clone()).await.status(), 201);
    let scope = ScopedKey {
        principal: "hdr:alice".into(),
        route: "POST /payments".into(),
        key: IdempotencyKey::new(KEY).unwrap(),
    };
    damage_memory(&store, &scope, Damage::TruncateBody).await;
    let resp = call(store.clone(), p(), seen.clone()).await;
    assert_eq!(resp.status(), 500);
    assert!(resp.headers().get("idempotent-replayed").is_none());
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    assert!(String::from_utf8_lossy(&body).contains("urn:idemgate:problem:record-corrupt"));
    assert_eq!(seen.lock().unwrap().len(), 1, "ran once");
}
