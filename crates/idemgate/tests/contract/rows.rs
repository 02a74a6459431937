//! The rows, in about the README's order, each checking the answer and the side effects
//! (those about stored records are in `records.rs`).

use std::time::Duration;

use futures_util::future::BoxFuture;
use idemgate::core::{IdempotencyKey, ScopedKey};
use idemgate::IdempotencyStore;
use reqwest::{Response, StatusCode};
use tokio::io::AsyncWriteExt;

use crate::app::App;

/// Damages the completed record of a key behind the store's back (the body loses a byte).
pub(crate) type Damage<St> = for<'a> fn(&'a St, &'a ScopedKey) -> BoxFuture<'a, ()>;

/// A keyed `POST` to `path` as `user` (no `Authorization` if `None`) with `body`.
pub(crate) async fn post(
    app: &App<impl Sized>,
    path: &str,
    user: Option<&str>,
    key: Option<&str>,
    body: &str,
) -> Response {
    let mut rb = reqwest::Client::new()
        .post(format!("{}{path}", app.base))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(user) = user {
        rb = rb.header("authorization", format!("Bearer {user}"));
    }
    if let Some(key) = key {
        rb = rb.header("idempotency-key", key);
    }
    rb.send().await.unwrap()
}

/// The problem `type`'s anchor of a problem+json answer.
pub(crate) async fn problem(resp: Response) -> (StatusCode, String) {
    let status = resp.status();
    assert_eq!(resp.headers()["content-type"], "application/problem+json");
    let body: serde_json::Value = resp.json().await.unwrap();
    let anchor = body["type"]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    (status, anchor)
}

pub(crate) fn replayed(resp: &Response) -> bool {
    resp.headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

/// Waits until `what` happened `n` times.
pub(crate) async fn until<St>(app: &App<St>, what: &str, n: u64) {
    for _ in 0..500 {
        if app.effects.get(what) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what} did not happen {n} times");
}

pub(crate) fn scope(user: &str, route: &str, key: &str) -> ScopedKey {
    ScopedKey {
        principal: format!("ext:{user}"),
        route: route.into(),
        key: IdempotencyKey::new(key).unwrap(),
    }
}

pub(crate) async fn all<St: IdempotencyStore>(app: &App<St>, damage: Damage<St>) {
    pass_through_and_admission(app).await;
    first_run_replay_and_scope(app).await;
    in_flight_and_disconnect(app).await;
    failures(app).await;
    concurrent_retries(app).await;
    crate::records::lapsed_corrupt_and_expired(app, damage).await;
    limits_and_kept_responses(app).await;
}

async fn pass_through_and_admission<St>(app: &App<St>) {
    // Method not covered: passed through, runs every time, even with a key.
    for _ in 0..2 {
        let url = format!("{}/payments", app.base);
        let resp = reqwest::Client::new()
            .get(url)
            .header("idempotency-key", "get-key-0001");
        let resp = resp
            .header("authorization", "Bearer alice")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert!(!replayed(&resp));
    }
    assert_eq!(app.effects.get("get"), 2);
    // No key, route does not require one: passed through, nothing stored.
    for n in 1..=2 {
        let resp = post(app, "/payments", Some("alice"), None, "{}").await;
        assert_eq!(resp.status(), 201);
        assert_eq!(app.effects.get("payments"), n);
    }
    // No key, route requires one; a malformed key; no principal; a body over the limit.
    let (s, a) = problem(post(app, "/required", Some("alice"), None, "{}").await).await;
    assert_eq!((s.as_u16(), a.as_str()), (400, "missing-key"));
    let (s, a) = problem(post(app, "/payments", Some("alice"), Some("short"), "{}").await).await;
    assert_eq!((s.as_u16(), a.as_str()), (400, "invalid-key"));
    let anonymous = post(app, "/payments", None, Some("anon-key-0001"), "{}").await;
    assert_eq!(
        problem(anonymous).await,
        (StatusCode::UNAUTHORIZED, "missing-principal".into())
    );
    let big = format!(r#"{{"pad":"{}"}}"#, "x".repeat(5000));
    let (s, a) =
        problem(post(app, "/payments", Some("alice"), Some("big-body-0001"), &big).await).await;
    assert_eq!((s.as_u16(), a.as_str()), (413, "body-too-large"));
    assert_eq!(app.effects.get("payments"), 2, "none of them ran");
}

async fn first_run_replay_and_scope<St>(app: &App<St>) {
    let key = Some("pay-key-00000001");
    let first = post(app, "/payments", Some("alice"), key, r#"{"amount":1}"#).await;
    assert_eq!(first.status(), 201);
    assert!(first.headers().get("set-cookie").is_some());
    let location = first.headers()["location"].clone();
    let body = first.text().await.unwrap();
    assert_eq!(app.effects.get("payments"), 3);
    // Completed: replayed (members reordered count as the same JSON), Set-Cookie never.
    let retry = post(app, "/payments", Some("alice"), key, r#"{ "amount" : 1 }"#).await;
    assert_eq!(retry.status(), 201);
    assert!(replayed(&retry));
    assert_eq!(retry.headers()["location"], location);
    assert!(retry.headers().get("set-cookie").is_none());
    assert_eq!(retry.text().await.unwrap(), body);
    // Another fingerprint: 422, whatever the state; the record is untouched.
    let other = post(app, "/payments", Some("alice"), key, r#"{"amount":2}"#).await;
    assert_eq!(
        problem(other).await,
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            "fingerprint-mismatch".into()
        )
    );
    // A client-sent principal-looking header has no effect: bob's key is bob's.
    let forged = reqwest::Client::new()
        .post(format!("{}/payments", app.base))
        .header("authorization", "Bearer bob")
        .header("x-user-id", "alice")
        .header("idempotency-key", "pay-key-00000001")
        .header("content-type", "application/json")
        .body(r#"{"amount":1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 201);
    assert!(!replayed(&forged), "bob never gets alice's response");
    assert!(forged.text().await.unwrap().contains("\"bob\""));
    assert_eq!(app.effects.get("payments"), 4);
    // The scope is axum's template: the key on another account of the route is a reuse.
    let acct = |id: &str| format!("/accounts/{id}/payments");
    let k = Some("acct-key-0000001");
    assert_eq!(
        post(app, &acct("1"), Some("alice"), k, "{}").await.status(),
        201
    );
    let (s, _) = problem(post(app, &acct("2"), Some("alice"), k, "{}").await).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(app.effects.get("payments"), 5);
    // A key used on one route never replays on another.
    let elsewhere = post(app, "/required", Some("alice"), key, r#"{"amount":1}"#).await;
    assert_eq!(elsewhere.status(), 201);
    assert!(!replayed(&elsewhere));
    assert_eq!(app.effects.get("payments"), 6);
}

async fn in_flight_and_disconnect<St>(app: &App<St>) {
    // First still running: 409 with Retry-After; then the replay.
    let (base, key) = (app.base.clone(), "slow-key-0000001");
    let first = tokio::spawn(async move {
        let url = format!("{base}/slow");
        let rb = reqwest::Client::new()
            .post(url)
            .header("authorization", "Bearer alice")
            .header("content-type", "application/json");
        rb.header("idempotency-key", key)
            .body("{}")
            .send()
            .await
            .unwrap()
            .status()
    });
    until(app, "slow-started", 1).await;
    let conflict = post(app, "/slow", Some("alice"), Some(key), "{}").await;
    assert!(conflict.headers().get("retry-after").is_some());
    assert_eq!(
        problem(conflict).await,
        (StatusCode::CONFLICT, "request-in-flight".into())
    );
    app.gate.notify_one();
    assert_eq!(first.await.unwrap(), 201);
    assert!(replayed(
        &post(app, "/slow", Some("alice"), Some(key), "{}").await
    ));
    assert_eq!(app.effects.get("slow"), 1);

    // The client disconnects while its operation runs: it still runs to its end, once,
    // and records its outcome; the retry gets the replay.
    let key = "slow-key-0000002";
    let addr = app.base.trim_start_matches("http://").to_owned();
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let req = format!(
        "POST /slow HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer alice\r\n\
         idempotency-key: {key}\r\ncontent-type: application/json\r\n\
         content-length: 2\r\n\r\n{{}}"
    );
    tcp.write_all(req.as_bytes()).await.unwrap();
    until(app, "slow-started", 2).await;
    drop(tcp);
    tokio::time::sleep(Duration::from_millis(100)).await;
    app.gate.notify_one();
    until(app, "slow", 2).await;
    let mut retry = post(app, "/slow", Some("alice"), Some(key), "{}").await;
    for _ in 0..100 {
        if retry.status() != StatusCode::CONFLICT {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        retry = post(app, "/slow", Some("alice"), Some(key), "{}").await;
    }
    assert_eq!(retry.status(), 201);
    assert!(replayed(&retry));
    assert_eq!(
        app.effects.get("slow"),
        2,
        "the disconnected operation ran once"
    );
}

async fn failures<St>(app: &App<St>) {
    // An erroring handler (5xx): the key fails; retries get 500, never a second run.
    let key = Some("fail-key-0000001");
    assert_eq!(
        post(app, "/fail", Some("alice"), key, "{}").await.status(),
        500
    );
    let (s, a) = problem(post(app, "/fail", Some("alice"), key, "{}").await).await;
    assert_eq!((s.as_u16(), a.as_str()), (500, "previous-attempt-failed"));
    assert_eq!(app.effects.get("fail"), 1);
    // A panicking handler: caught, the key fails (no key stuck in progress), runs once.
    let key = Some("panic-key-000001");
    let (s, a) = problem(post(app, "/panic", Some("alice"), key, "{}").await).await;
    assert_eq!((s.as_u16(), a.as_str()), (500, "operation-panicked"));
    let (s, a) = problem(post(app, "/panic", Some("alice"), key, "{}").await).await;
    assert_eq!((s.as_u16(), a.as_str()), (500, "previous-attempt-failed"));
    assert_eq!(app.effects.get("panic"), 1);
    // A release status (503: nothing was done): the key is released and may run again.
    let key = Some("busy-key-0000001");
    assert_eq!(
        post(app, "/busy", Some("alice"), key, "{}").await.status(),
        503
    );
    assert_eq!(
        post(app, "/busy", Some("alice"), key, "{}").await.status(),
        503
    );
    assert_eq!(app.effects.get("busy"), 2);
}

async fn limits_and_kept_responses<St>(app: &App<St>) {
    // Over a per-principal limit: 429 with Retry-After, nothing stored or run.
    let base = app.base.clone();
    let first = tokio::spawn(async move {
        let url = format!("{base}/limited");
        let rb = reqwest::Client::new()
            .post(url)
            .header("authorization", "Bearer carol");
        rb.header("idempotency-key", "limit-key-000001")
            .body("{}")
            .send()
            .await
            .unwrap()
            .status()
    });
    until(app, "limited-started", 1).await;
    let over = post(
        app,
        "/limited",
        Some("carol"),
        Some("limit-key-000002"),
        "{}",
    )
    .await;
    assert!(over.headers().get("retry-after").is_some());
    assert_eq!(
        problem(over).await,
        (StatusCode::TOO_MANY_REQUESTS, "principal-limited".into())
    );
    app.gate.notify_one();
    assert_eq!(first.await.unwrap(), 201);
    assert_eq!(app.effects.get("limited"), 1);
    // Too large to keep: delivered whole, retries get 410, never a second run.
    let key = Some("big-resp-key-001");
    let whole = post(app, "/big", Some("alice"), key, "{}").await;
    assert_eq!(whole.bytes().await.unwrap().len(), 2048);
    let (s, a) = problem(post(app, "/big", Some("alice"), key, "{}").await).await;
    assert_eq!((s.as_u16(), a.as_str()), (410, "response-not-kept"));
    // A 304 completes as not replayable.
    let key = Some("not-modified-k01");
    assert_eq!(
        post(app, "/not-modified", Some("alice"), key, "{}")
            .await
            .status(),
        304
    );
    let (s, a) = problem(post(app, "/not-modified", Some("alice"), key, "{}").await).await;
    assert_eq!((s.as_u16(), a.as_str()), (410, "response-not-kept"));
    assert_eq!(
        (app.effects.get("big"), app.effects.get("not-modified")),
        (1, 1)
    );
}

/// Many copies of one request at once (a client library retrying on a timer, a mesh
/// retrying): one runs; the others get `409` or its replay, never a second run.
async fn concurrent_retries<St>(app: &App<St>) {
    let before = app.effects.get("payments");
    let mut all = Vec::new();
    for _ in 0..32 {
        let (base, client) = (app.base.clone(), reqwest::Client::new());
        all.push(tokio::spawn(async move {
            let resp = client
                .post(format!("{base}/payments"))
                .header("authorization", "Bearer dave")
                .header("idempotency-key", "burst-key-000001")
                .header("content-type", "application/json")
                .body(r#"{"amount":5}"#)
                .send()
                .await
                .unwrap();
            (resp.status(), resp.text().await.unwrap())
        }));
    }
    let mut bodies = std::collections::HashSet::new();
    for task in all {
        let (status, body) = task.await.unwrap();
        match status.as_u16() {
            201 => drop(bodies.insert(body)),
            409 => assert!(body.contains("request-in-flight"), "{body}"),
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(app.effects.get("payments"), before + 1, "one of 32 ran");
    assert!(
        bodies.len() <= 1,
        "every 201 is the same response: {bodies:?}"
    );
}
