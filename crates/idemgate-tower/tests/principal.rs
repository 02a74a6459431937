//! Principal sources through the layer: an ambiguous or unverifiable caller is answered
//! before anything is stored or forwarded, and a refreshed JWT keeps its scope.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use http::{HeaderName, Request, Response};
use idemgate_core::MemoryStore;
use idemgate_tower::body::{full, BoxBody};
#[cfg(feature = "jwt")]
use idemgate_tower::JwtVerifier;
use idemgate_tower::{IdempotencyLayer, Policy, PrincipalSource, RoutePolicy};
#[cfg(feature = "jwt")]
use jsonwebtoken::{encode, EncodingKey, Header};
use tower::{service_fn, Layer, ServiceExt};

#[cfg(feature = "jwt")]
const SECRET: &[u8] = b"an-hs256-test-secret-of-32-bytes!!";

fn policy(principal: PrincipalSource) -> Policy {
    Policy::default().with_default_route(RoutePolicy::default().with_principal(principal))
}

/// The layer on a fresh memory store around a handler counting its calls.
fn service(
    principal: PrincipalSource,
) -> (
    impl tower::Service<
            Request<BoxBody>,
            Response = Response<BoxBody>,
            Error = Infallible,
            Future: Send,
        > + Clone,
    Arc<AtomicUsize>,
    Arc<MemoryStore>,
) {
    let calls = Arc::new(AtomicUsize::new(0));
    let store = Arc::new(MemoryStore::new());
    let counted = calls.clone();
    let inner = service_fn(move |_req: Request<BoxBody>| {
        counted.fetch_add(1, Ordering::SeqCst);
        async {
            Ok::<_, Infallible>(
                Response::builder()
                    .status(201)
                    .body(full("ok".into()))
                    .unwrap(),
            )
        }
    });
    let layer = IdempotencyLayer::new(store.clone(), policy(principal));
    (layer.layer(inner), calls, store)
}

fn request(headers: &[(&str, &str)]) -> Request<BoxBody> {
    let mut rb = Request::post("/payments").header("idempotency-key", "key-00000001");
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    rb.body(full("{}".into())).unwrap()
}

async fn problem_type(resp: Response<BoxBody>) -> String {
    use http_body_util::BodyExt;
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    json["type"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn an_ambiguous_principal_header_is_400_and_nothing_runs() {
    let source = PrincipalSource::Header(HeaderName::from_static("x-user-id"));
    let (svc, calls, store) = service(source);
    for headers in [
        &[("x-user-id", "alice"), ("x-user-id", "bob")][..],
        &[("x-user-id", "alice,bob")],
    ] {
        let resp = svc.clone().oneshot(request(headers)).await.unwrap();
        assert_eq!(resp.status(), 400);
        assert!(problem_type(resp).await.ends_with(":ambiguous-principal"));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(store.len(), 0);
    let resp = svc
        .oneshot(request(&[("x-user-id", "alice")]))
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
}

#[cfg(feature = "jwt")]
fn bearer(sub: &str, iat: u64, jti: &str) -> String {
    let claims = serde_json::json!({"sub": sub, "iat": iat, "exp": iat + 3600, "jti": jti});
    let t = encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(SECRET),
    )
    .unwrap();
    format!("Bearer {t}")
}

#[cfg(feature = "jwt")]
#[tokio::test]
async fn a_refreshed_token_replays_and_a_bad_one_is_401() {
    let verifier = JwtVerifier::new().with_hs256_secret(SECRET).unwrap();
    let source = PrincipalSource::Jwt {
        claim: "sub".into(),
        verifier: Arc::new(verifier),
    };
    let (svc, calls, store) = service(source);
    let now = jsonwebtoken::get_current_timestamp();
    let first = bearer("alice", now - 3000, "1");
    let resp = svc
        .clone()
        .oneshot(request(&[("authorization", &first)]))
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let refreshed = bearer("alice", now, "2");
    let resp = svc
        .clone()
        .oneshot(request(&[("authorization", &refreshed)]))
        .await
        .unwrap();
    assert_eq!(resp.headers()["idempotent-replayed"], "true");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let expired = bearer("alice", now - 7200, "3");
    let resp = svc
        .clone()
        .oneshot(request(&[("authorization", &expired)]))
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    assert_eq!(
        resp.headers()["www-authenticate"],
        "Bearer error=\"invalid_token\""
    );
    assert!(problem_type(resp).await.ends_with(":invalid-token"));
    let bob = bearer("bob", now, "4");
    let resp = svc
        .oneshot(request(&[("authorization", &bob)]))
        .await
        .unwrap();
    assert_eq!(resp.status(), 201, "another subject has its own scope");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(store.len(), 2);
}
