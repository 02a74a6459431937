//! Fingerprints through the layer, on the memory store: records written with fingerprint
//! version 1, encoded bodies and the decoded-size limit, large bodies.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use idemgate_core::fingerprint::{Fingerprint, FingerprintInput, FingerprintOptions};
use idemgate_core::{IdempotencyKey, IdempotencyStore, InsertOutcome, InsertRequest, LeaseToken};
use idemgate_core::{MemoryStore, ScopedKey, StoredResponse};
use idemgate_tower::body::{full, BoxBody};
use idemgate_tower::{IdempotencyLayer, Policy, PrincipalSource, RoutePolicy};
use tower::{service_fn, Layer, ServiceExt};

const KEY: &str = "key-fingerprint-0001";

fn gzip(members: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in members {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        enc.write_all(m).unwrap();
        out.extend(enc.finish().unwrap());
    }
    out
}

fn policy() -> Policy {
    Policy::default().with_default_route(
        RoutePolicy::default()
            .with_principal(PrincipalSource::Header(http::HeaderName::from_static(
                "x-user",
            )))
            .with_max_body_bytes(256 << 10),
    )
}

fn request(encoding: Option<&str>, body: Vec<u8>) -> Request<BoxBody> {
    let mut req = Request::post("/payments")
        .header("idempotency-key", KEY)
        .header("x-user", "alice")
        .header("content-type", "application/json");
    if let Some(e) = encoding {
        req = req.header("content-encoding", e);
    }
    req.body(full(body.into())).unwrap()
}

/// Sends `req` through the layer over a service that counts calls and answers `201`.
async fn send(
    store: Arc<MemoryStore>,
    calls: Arc<AtomicUsize>,
    req: Request<BoxBody>,
) -> Response<BoxBody> {
    let svc = service_fn(move |_req: Request<BoxBody>| {
        calls.fetch_add(1, Ordering::SeqCst);
        async {
            Ok::<_, std::convert::Infallible>(
                Response::builder()
                    .status(201)
                    .body(full("paid".into()))
                    .unwrap(),
            )
        }
    });
    IdempotencyLayer::new(store, policy())
        .layer(svc)
        .oneshot(req)
        .await
        .unwrap()
}

fn scope() -> ScopedKey {
    ScopedKey {
        principal: "hdr:alice".into(),
        route: "POST /payments".into(),
        key: IdempotencyKey::new(KEY).unwrap(),
    }
}

/// A completed record as the release before fingerprint version 2 wrote it.
async fn version_1_record(store: &MemoryStore, body: &[u8]) {
    let input = FingerprintInput {
        method: "POST",
        route: "POST /payments",
        path: "/payments",
        query: None,
        content_type: Some("application/json"),
        content_encoding: Some("gzip"),
        headers: &[],
        body,
    };
    let opts = FingerprintOptions {
        ignore_json_pointers: &[],
        max_decoded_bytes: 8 * (256 << 10),
    };
    let fingerprint = Fingerprint::compute_version(1, &input, &opts).unwrap();
    let req = InsertRequest {
        key: scope(),
        fingerprint,
        token: LeaseToken::random(),
        lease_ttl: Duration::from_secs(10),
        record_ttl: Duration::from_secs(3600),
    };
    let InsertOutcome::Inserted(lease) = store.insert_or_get(&req).await.unwrap() else {
        panic!("fresh store")
    };
    let paid = StoredResponse {
        status: 201,
        headers: vec![("content-type".into(), "text/plain".into())],
        body: "paid earlier".into(),
        replayable: true,
        sealed_by: None,
    };
    store.complete(&lease, &paid).await.unwrap();
}

#[tokio::test]
async fn a_version_1_record_replays_to_its_retry_and_refuses_another_request() {
    let (store, calls) = (Arc::new(MemoryStore::new()), Arc::new(AtomicUsize::new(0)));
    let body = gzip(&[br#"{"amount":10,"currency":"EUR"}"#]);
    version_1_record(&store, &body).await;
    let retry = send(store.clone(), calls.clone(), request(Some("gzip"), body)).await;
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    let body = retry.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"paid earlier");
    let other = gzip(&[br#"{"amount":11,"currency":"EUR"}"#]);
    let other = send(store.clone(), calls.clone(), request(Some("gzip"), other)).await;
    assert_eq!(other.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(calls.load(Ordering::SeqCst), 0, "nothing ran again");
    assert_eq!(
        store
            .get(&scope())
            .await
            .unwrap()
            .unwrap()
            .fingerprint
            .version,
        1
    );
}

#[tokio::test]
async fn a_body_that_decodes_past_the_limit_gets_413_unforwarded_and_unrecorded() {
    let (store, calls) = (Arc::new(MemoryStore::new()), Arc::new(AtomicUsize::new(0)));
    // 4 × 256 KiB is the default decoded limit; this inflates to 2 MiB from ~2 KiB
    let bomb = gzip(&[&vec![b' '; 2 << 20]]);
    assert!(bomb.len() < 16 << 10);
    let resp = send(store.clone(), calls.clone(), request(Some("gzip"), bomb)).await;
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(
        problem["detail"].as_str().unwrap().contains("decoded"),
        "{problem}"
    );
    assert!(problem["type"]
        .as_str()
        .unwrap()
        .ends_with(":body-too-large"));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert!(store.get(&scope()).await.unwrap().is_none());
    // just under the limit is fine
    let fits = gzip(&[&vec![b' '; 1 << 20]]);
    let resp = send(store.clone(), calls.clone(), request(Some("gzip"), fits)).await;
    assert_eq!(resp.status(), StatusCode::CREATED);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn large_and_encoded_bodies_are_fingerprinted_and_replayed() {
    for (encoding, body) in [
        (None, format!("[{}1]", "1,".repeat(100 << 10)).into_bytes()),
        (Some("gzip"), gzip(&[br#"{"a":"#, br#"1}"#])),
    ] {
        let (store, calls) = (Arc::new(MemoryStore::new()), Arc::new(AtomicUsize::new(0)));
        let first = send(
            store.clone(),
            calls.clone(),
            request(encoding, body.clone()),
        )
        .await;
        assert_eq!(first.status(), StatusCode::CREATED);
        let retry = send(store.clone(), calls.clone(), request(encoding, body)).await;
        assert_eq!(retry.status(), StatusCode::CREATED);
        assert_eq!(retry.headers()["idempotent-replayed"], "true");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
