//! Route matching by the path the upstream executes (issue 20 §1): spellings of one path
//! reach one scope or are refused with nothing forwarded, `unmatched = "refuse"`, the
//! forwarded path, and headers an upstream could read otherwise than the gateway.
//!
//! Requests go over a raw TCP connection: an HTTP client would clean `/./charges` or refuse
//! to send two `Content-Length` fields before the gateway saw them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemgate_gateway::config::{Config, RouteTable};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

mod spellings;

/// Spellings of `/charges` that servers read differently: refused.
const REFUSED: [&str; 12] = [
    "//charges",
    "/./charges",
    "/x/../charges",
    "/%2e/charges",
    "/charges/",
    "/charges;x=1",
    "/charges;jsessionid=1",
    "/charges%2Fx",
    "/charges%2fx",
    "/charges%5Cx",
    "/charges\\x",
    "/charges%00",
];

/// An answer read off the wire.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    /// The anchor of a problem answer's `type`.
    fn problem(&self) -> String {
        assert!(
            self.head.contains("content-type: application/problem+json"),
            "{}",
            self.head
        );
        let v: serde_json::Value = serde_json::from_str(&self.body).unwrap();
        assert_eq!(v["status"], self.status);
        let t = v["type"].as_str().unwrap();
        t.trim_start_matches("urn:idemgate:problem:").to_owned()
    }
}

/// Sends `head` (the request line and fields, each ending in CRLF) and `body` as bytes.
async fn raw(gw: &Gateway, head: &str, body: &str) -> Answer {
    let addr = gw.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("{head}host: gateway\r\nconnection: close\r\n\r\n{body}");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out))
        .await
        .expect("the gateway answers and closes")
        .unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
    let status = head[9..12].parse().unwrap();
    Answer {
        status,
        head: head.to_ascii_lowercase(),
        body: body.to_owned(),
    }
}

/// A JSON POST of alice to `path` with `key` (if any) and `extra` fields.
async fn post_raw(gw: &Gateway, path: &str, key: Option<&str>, extra: &str) -> Answer {
    let body = r#"{"amount":1000}"#;
    let key = key.map_or(String::new(), |k| format!("idempotency-key: {k}\r\n"));
    let head = format!(
        "POST {path} HTTP/1.1\r\nauthorization: Bearer alice\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{key}{extra}",
        body.len()
    );
    raw(gw, &head, body).await
}

/// A gateway in front of `up` whose only route is `POST /charges` with `route`'s settings.
async fn charges_gateway(
    up: &Upstream,
    route: RouteTable,
    edit: impl FnOnce(&mut Config),
) -> Gateway {
    gateway(&up.base, "memory://", |c| {
        c.routes = vec![route.with("route", "POST /charges")];
        edit(c);
    })
    .await
}

#[tokio::test]
async fn spellings_reach_one_scope_or_are_refused_and_never_forwarded() {
    let up = upstream().await;
    let gw = charges_gateway(&up, RouteTable::default(), |_| {}).await;
    let k = key();
    assert_eq!(post_raw(&gw, "/charges", Some(&k), "").await.status, 201);
    // One scope: the fingerprint holds the path as forwarded (as sent), so a mismatch.
    for same in ["/%63harges", "/ch%61rges"] {
        let a = post_raw(&gw, same, Some(&k), "").await;
        assert_eq!(
            (a.status, a.problem()),
            (422, "fingerprint-mismatch".into()),
            "{same}"
        );
    }
    for spelling in REFUSED {
        for key in [Some(k.as_str()), None] {
            let a = post_raw(&gw, spelling, key, "").await;
            assert_eq!(
                (a.status, a.problem()),
                (400, "ambiguous-path".into()),
                "{spelling}"
            );
        }
    }
    let retry = post_raw(&gw, "/charges", Some(&k), "").await;
    assert!(
        retry.head.contains("idempotent-replayed: true"),
        "{}",
        retry.head
    );
    assert_eq!(up.count(), 1, "one execution for every spelling");
    gw.stop().await;
}

#[tokio::test]
async fn key_required_cannot_be_escaped_by_a_spelling() {
    let up = upstream().await;
    let route = RouteTable::default()
        .with("key_required", true)
        .with("case_insensitive", true);
    let gw = charges_gateway(&up, route, |_| {}).await;
    for spelling in ["/charges", "/%63harges", "/Charges", "/CH%41RGES"] {
        let a = post_raw(&gw, spelling, None, "").await;
        assert_eq!(
            (a.status, a.problem()),
            (400, "missing-key".into()),
            "{spelling}"
        );
    }
    for spelling in REFUSED {
        let a = post_raw(&gw, spelling, None, "").await;
        assert_eq!(
            (a.status, a.problem()),
            (400, "ambiguous-path".into()),
            "{spelling}"
        );
    }
    assert_eq!(up.count(), 0);
    // Letter case folds into the route's scope: one execution.
    let k = key();
    assert_eq!(post_raw(&gw, "/charges", Some(&k), "").await.status, 201);
    let upper = post_raw(&gw, "/Charges", Some(&k), "").await;
    assert_eq!(
        (upper.status, upper.problem()),
        (422, "fingerprint-mismatch".into())
    );
    assert_eq!(up.count(), 1);
    gw.stop().await;
}

#[tokio::test]
async fn unmatched_refuse_answers_404_and_forwards_nothing() {
    let up = upstream().await;
    let gw = charges_gateway(&up, RouteTable::default(), |c| {
        c.unmatched = "refuse".into()
    })
    .await;
    for path in ["/payments", "/Charges", "/charges/x"] {
        for key in [Some("key-unmatched-0001"), None] {
            let a = post_raw(&gw, path, key, "").await;
            assert_eq!(
                (a.status, a.problem()),
                (404, "no-such-route".into()),
                "{path}"
            );
        }
    }
    assert_eq!(up.count(), 0);
    // Methods that are not covered pass through.
    let get = raw(&gw, "GET /payments HTTP/1.1\r\n", "").await;
    assert_eq!(get.status, 201);
    assert_eq!(up.count(), 1);
    gw.stop().await;
}

#[tokio::test]
async fn repeated_content_type_encoding_or_fingerprint_header_is_refused_unforwarded() {
    let up = upstream().await;
    let route = RouteTable::default().with("fingerprint_headers", vec!["x-account"]);
    let gw = charges_gateway(&up, route, |_| {}).await;
    for extra in [
        "content-type: text/plain\r\n",
        "content-encoding: identity\r\ncontent-encoding: identity\r\n",
        "x-account: acct_1\r\nx-account: acct_2\r\n",
    ] {
        let a = post_raw(&gw, "/charges", Some(&key()), extra).await;
        assert_eq!(
            (a.status, a.problem()),
            (400, "ambiguous-request".into()),
            "{extra}"
        );
    }
    assert_eq!(up.count(), 0);
    let once = post_raw(&gw, "/charges", Some(&key()), "x-account: acct_1\r\n").await;
    assert_eq!(once.status, 201);
    gw.stop().await;
}

#[tokio::test]
async fn differing_content_lengths_get_a_problem_body_and_are_not_forwarded() {
    let up = upstream().await;
    let gw = charges_gateway(&up, RouteTable::default(), |_| {}).await;
    let head = format!(
        "POST /charges HTTP/1.1\r\nauthorization: Bearer alice\r\nidempotency-key: {}\r\ncontent-length: 2\r\ncontent-length: 4\r\n",
        key()
    );
    let a = raw(&gw, &head, "{}{}").await;
    assert_eq!((a.status, a.problem()), (400, "ambiguous-request".into()));
    assert!(a.body.contains("content-length"), "{}", a.body);
    assert_eq!(up.count(), 0);
    gw.stop().await;
}

/// An upstream that answers `201` and records the request target of each request.
async fn recording_upstream() -> (String, Arc<Mutex<Vec<String>>>) {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let record = seen.clone();
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        record.lock().unwrap().push(uri.to_string());
        async { (axum::http::StatusCode::CREATED, "charged") }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, seen)
}

#[tokio::test]
async fn forward_path_sends_the_path_as_sent_or_its_normal_form() {
    let (base, seen) = recording_upstream().await;
    let as_sent = gateway(&base, "memory://", |_| {}).await;
    let a = post_raw(&as_sent, "/%63harges?currency=eur", Some(&key()), "").await;
    assert_eq!(a.status, 201);
    as_sent.stop().await;
    let normalised = gateway(&base, "memory://", |c| c.forward_path = "normalised".into()).await;
    let k = key();
    let a = post_raw(&normalised, "/%63h%61rges?currency=eur", Some(&k), "").await;
    assert_eq!(a.status, 201);
    // The fingerprint reads the forwarded (normal) path: another spelling replays.
    let retry = post_raw(&normalised, "/charges?currency=eur", Some(&k), "").await;
    assert!(
        retry.head.contains("idempotent-replayed: true"),
        "{}",
        retry.head
    );
    normalised.stop().await;
    assert_eq!(
        *seen.lock().unwrap(),
        ["/%63harges?currency=eur", "/charges?currency=eur"]
    );
}

#[test]
fn config_check_names_each_bad_path_setting() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("paths.toml");
    std::fs::write(
        &file,
        "upstream = \"http://127.0.0.1:3000\"\nunmatched = \"deny\"\nforward_path = \"normalized\"\n\
         [defaults]\ntrailing_slash = \"strip\"\n\
         [[routes]]\nroute = \"POST /charges\"\nencoded_slash = \"allow\"\ncase_insensitive = true\n\
         [[routes]]\nroute = \"POST /%63harges/x\"\n",
    )
    .unwrap();
    let (code, text) = run_idemgate(&["config", "check", file.to_str().unwrap()]);
    assert_eq!(code, 2, "{text}");
    for field in [
        "unmatched: `deny` is not \"default\" or \"refuse\"",
        "forward_path: `normalized` is not \"as-sent\" or \"normalised\"",
        "defaults.trailing_slash: `strip` is not \"refuse\" or \"same\"",
        "routes[0].encoded_slash: `allow` is not \"refuse\" or \"keep\"",
        "write `/charges/x`",
    ] {
        assert!(text.contains(field), "{field} in {text}");
    }
}
