//! Route matching by the path the upstream executes, through the layer on the memory store:
//! spellings of one path reach one scope or are refused unforwarded, `unmatched = refuse`,
//! the forwarded path, and headers an upstream could read otherwise than the fingerprint.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use http::{Request, Response};
use http_body_util::BodyExt;
use idemgate_core::MemoryStore;
use idemgate_tower::body::{full, BoxBody};
use idemgate_tower::path::{ForwardPath, TrailingSlash, Unmatched};
use idemgate_tower::{IdempotencyLayer, Policy, RoutePolicy};
use tower::{service_fn, Layer, ServiceExt};

/// The layer over a handler that counts its calls and keeps the last path and query.
struct Harness {
    store: Arc<MemoryStore>,
    calls: Arc<AtomicUsize>,
    seen: Arc<Mutex<String>>,
    policy: Policy,
}

impl Harness {
    fn new(policy: Policy) -> Self {
        Self {
            store: Arc::new(MemoryStore::new()),
            calls: Arc::default(),
            seen: Arc::default(),
            policy,
        }
    }

    async fn send(&self, req: http::request::Builder) -> Response<BoxBody> {
        let (calls, seen) = (self.calls.clone(), self.seen.clone());
        let svc = service_fn(move |req: Request<BoxBody>| {
            calls.fetch_add(1, Ordering::SeqCst);
            *seen.lock().unwrap() = req.uri().to_string();
            async {
                let resp = Response::builder().status(201).body(full("charged".into()));
                Ok::<_, std::convert::Infallible>(resp.unwrap())
            }
        });
        let layer = IdempotencyLayer::new(self.store.clone(), self.policy.clone());
        let req = req
            .header("authorization", "Bearer alice")
            .body(full("{\"amount\":1}".into()))
            .unwrap();
        layer.layer(svc).oneshot(req).await.unwrap()
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

fn post(path: &str, key: Option<&str>) -> http::request::Builder {
    let req = Request::post(path).header("content-type", "application/json");
    match key {
        Some(k) => req.header("idempotency-key", k),
        None => req,
    }
}

/// The problem `type` anchor of a problem answer with `status`.
async fn problem(resp: Response<BoxBody>, status: u16) -> String {
    assert_eq!(resp.status(), status);
    assert_eq!(resp.headers()["content-type"], "application/problem+json");
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let t = v["type"].as_str().unwrap();
    t.trim_start_matches("urn:idemgate:problem:").to_owned()
}

fn charges(route: RoutePolicy) -> Policy {
    Policy::default()
        .with_route("POST /charges", route)
        .unwrap()
}

#[tokio::test]
async fn spellings_of_one_path_share_one_scope_and_never_run_twice() {
    let h = Harness::new(charges(RoutePolicy::default()));
    let first = h.send(post("/charges", Some("key-spelling-1"))).await;
    assert_eq!(first.status(), 201);
    // Same scope; the fingerprint keeps the path as forwarded (as sent): a mismatch.
    for spelling in ["/%63harges", "/ch%61rges", "/%63%68%61%72%67%65%73"] {
        let resp = h.send(post(spelling, Some("key-spelling-1"))).await;
        assert_eq!(
            problem(resp, 422).await,
            "fingerprint-mismatch",
            "{spelling}"
        );
    }
    let retry = h.send(post("/charges", Some("key-spelling-1"))).await;
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(h.calls(), 1);
    assert_eq!(h.store.len(), 1);
}

#[tokio::test]
async fn with_forward_path_normalised_spellings_replay() {
    let mut policy = charges(RoutePolicy::default());
    policy.forward_path = ForwardPath::Normalised;
    let h = Harness::new(policy);
    let first = h
        .send(post("/%63harges?currency=eur", Some("key-normal-1")))
        .await;
    assert_eq!(first.status(), 201);
    assert_eq!(*h.seen.lock().unwrap(), "/charges?currency=eur");
    for spelling in ["/charges?currency=eur", "/ch%61rges?currency=eur"] {
        let retry = h.send(post(spelling, Some("key-normal-1"))).await;
        assert_eq!(retry.headers()["idempotent-replayed"], "true", "{spelling}");
    }
    assert_eq!(h.calls(), 1);
}

#[tokio::test]
async fn refused_spellings_are_never_forwarded_with_or_without_a_key() {
    let h = Harness::new(charges(RoutePolicy::default().with_key_required(true)));
    for spelling in [
        "//charges",
        "/./charges",
        "/a/../charges",
        "/%2e/charges",
        "/charges/",
        "/charges;x=1",
        "/charges%2Fx",
        "/charges%5Cx",
        "/charges%00",
    ] {
        for key in [Some("key-refused-1"), None] {
            let resp = h.send(post(spelling, key)).await;
            assert_eq!(problem(resp, 400).await, "ambiguous-path", "{spelling}");
        }
    }
    assert_eq!(h.calls(), 0);
    assert_eq!(h.store.len(), 0);
    // key_required holds for every spelling that reaches the route.
    let resp = h.send(post("/%63harges", None)).await;
    assert_eq!(problem(resp, 400).await, "missing-key");
    assert_eq!(h.calls(), 0);
    // Methods that are not covered pass untouched, whatever their spelling.
    let get = h.send(Request::get("//charges")).await;
    assert_eq!(get.status(), 201);
    assert_eq!(h.calls(), 1);
}

#[tokio::test]
async fn trailing_slash_same_is_the_route() {
    let h = Harness::new(charges(
        RoutePolicy::default().with_trailing_slash(TrailingSlash::Same),
    ));
    let first = h.send(post("/charges/", Some("key-slash-1"))).await;
    assert_eq!(first.status(), 201);
    let other = h.send(post("/charges", Some("key-slash-1"))).await;
    assert_eq!(problem(other, 422).await, "fingerprint-mismatch");
    assert_eq!(h.calls(), 1);
}

#[tokio::test]
async fn unmatched_refuse_answers_404_unforwarded() {
    let mut policy = charges(RoutePolicy::default());
    policy.unmatched = Unmatched::Refuse;
    let h = Harness::new(policy);
    for key in [Some("key-unmatched-1"), None] {
        let resp = h.send(post("/payments", key)).await;
        assert_eq!(problem(resp, 404).await, "no-such-route");
    }
    assert_eq!(h.calls(), 0);
    let matched = h.send(post("/charges", Some("key-unmatched-2"))).await;
    assert_eq!(matched.status(), 201);
    assert_eq!(h.calls(), 1);
}

#[tokio::test]
async fn repeated_body_and_fingerprint_headers_are_ambiguous() {
    let h = Harness::new(charges(
        RoutePolicy::default()
            .with_fingerprint_headers(vec![http::HeaderName::from_static("x-account")]),
    ));
    let cases = [
        ("content-type", "text/plain"),
        ("content-encoding", "identity"),
        ("x-account", "acct_1"),
    ];
    for (name, value) in cases {
        let mut req = post("/charges", Some("key-headers-1"));
        if name != "content-type" {
            req = req.header(name, value);
        }
        let resp = h.send(req.header(name, value)).await;
        assert_eq!(problem(resp, 400).await, "ambiguous-request", "{name}");
    }
    let lengths = post("/charges", Some("key-headers-1"))
        .header("content-length", "12")
        .header("content-length", "13");
    assert_eq!(
        problem(h.send(lengths).await, 400).await,
        "ambiguous-request"
    );
    assert_eq!(h.calls(), 0);
    assert_eq!(h.store.len(), 0);
    let once = post("/charges", Some("key-headers-1")).header("x-account", "acct_1");
    assert_eq!(h.send(once).await.status(), 201);
}

/// A header that makes the upstream run another path (`SCRIPT_NAME`: gunicorn strips the
/// prefix) or method (`X-HTTP-Method-Override`) is refused, keyed or not, on a route that
/// requires a key and on an unmatched path; an empty list lets such requests through.
#[tokio::test]
async fn path_and_method_override_headers_are_ambiguous_unless_turned_off() {
    let key_required = RoutePolicy::default().with_key_required(true);
    let h = Harness::new(charges(key_required.clone()));
    let overrides = [
        ("/x/charges", "SCRIPT_NAME", "/x"),
        ("/charges", "X-HTTP-Method-Override", "PATCH"),
        ("/charges", "x-method-override", "PUT"),
    ];
    for (path, name, value) in overrides {
        for key in [Some("key-override-1"), None] {
            let resp = h.send(post(path, key).header(name, value)).await;
            assert_eq!(problem(resp, 400).await, "ambiguous-request", "{name}");
        }
    }
    assert_eq!(h.calls(), 0, "nothing forwarded");
    assert_eq!(h.store.len(), 0, "nothing stored");
    let plain = h.send(post("/charges", Some("key-override-1"))).await;
    assert_eq!(plain.status(), 201);
    assert_eq!(h.calls(), 1);

    let mut off = charges(key_required);
    off.override_headers.clear();
    let h = Harness::new(off);
    let req = post("/x/charges", Some("key-override-2")).header("script_name", "/x");
    assert_eq!(h.send(req).await.status(), 201);
    let req = post("/charges", Some("key-override-3")).header("x-http-method-override", "PATCH");
    assert_eq!(h.send(req).await.status(), 201);
    assert_eq!(h.calls(), 2, "forwarded when the list is empty");
}

/// A request with `method` spelled as given, e.g. `post`.
fn with_method(method: &str, path: &str, key: Option<&str>) -> http::request::Builder {
    post(path, key).method(http::Method::from_bytes(method.as_bytes()).unwrap())
}

#[tokio::test]
async fn escapes_of_characters_allowed_raw_share_the_scope_of_the_raw_spelling() {
    let h = Harness::new(Policy::default());
    let key = Some("key-at-sign-1");
    let first = h.send(post("/users/alice@example.com/charges", key)).await;
    assert_eq!(first.status(), 201);
    // Same scope; the fingerprint reads the path as forwarded (as sent): a mismatch.
    let again = h
        .send(post("/users/alice%40example.com/charges", key))
        .await;
    assert_eq!(problem(again, 422).await, "fingerprint-mismatch");
    let mut policy = Policy::default();
    policy.forward_path = ForwardPath::Normalised;
    let n = Harness::new(policy);
    let key = Some("key-utf8-0001");
    assert_eq!(n.send(post("/caf%c3%a9/%3a", key)).await.status(), 201);
    assert_eq!(*n.seen.lock().unwrap(), "/caf%C3%A9/:");
    let retry = n.send(post("/caf\u{e9}/:", key)).await;
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    let bad = n.send(post("/caf%C0%AF", key)).await;
    assert_eq!(problem(bad, 400).await, "ambiguous-path");
    assert_eq!((h.calls(), n.calls()), (1, 1));
}

#[tokio::test]
async fn a_covered_method_in_another_case_sibling_templates_and_long_paths_are_refused() {
    let same = RoutePolicy::default()
        .with_trailing_slash(TrailingSlash::Same)
        .with_case_insensitive(true);
    let policy = Policy::default()
        .with_route("POST /api/pay", same)
        .unwrap()
        .with_route("POST /api/{resource}", RoutePolicy::default())
        .unwrap()
        .with_route("POST /{*rest}", RoutePolicy::default())
        .unwrap();
    let h = Harness::new(policy);
    let long = format!("/{}", "x".repeat(2000));
    for key in [Some("key-refused-2"), None] {
        for method in ["post", "Post", "patch"] {
            let resp = h.send(with_method(method, "/api/pay", key)).await;
            assert_eq!(problem(resp, 400).await, "ambiguous-request", "{method}");
        }
        for path in ["/api/PAY", "/api/pay/"] {
            let resp = h.send(post(path, key)).await;
            assert_eq!(problem(resp, 400).await, "ambiguous-path", "{path}");
        }
    }
    let unmatched = Harness::new(Policy::default());
    for key in [Some("key-refused-3"), None] {
        let resp = unmatched.send(post(&long, key)).await;
        assert_eq!(problem(resp, 414).await, "path-too-long");
    }
    assert_eq!((h.calls(), unmatched.calls()), (0, 0));
    assert_eq!(h.store.len() + unmatched.store.len(), 0);
    // The exact spelling runs, once.
    let ok = h.send(post("/api/pay", Some("key-refused-4"))).await;
    assert_eq!(ok.status(), 201);
    assert_eq!(h.calls(), 1);
}
