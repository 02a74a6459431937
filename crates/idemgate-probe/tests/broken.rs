//! The probe against implementations broken in ways that look right from one request:
//! one that lets another principal's or route's request take a key's record over (its
//! answers hold the id in `Location` only, behind a constant body), and one that forgets a
//! request whose client closed its side, though it ran it and wrote its answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;
use common::{args, failed, probe};

/// Records by key alone: a request from another principal or on another route runs anew
/// and replaces the record. Ids are in `Location`; every body is the same.
async fn overwriting() -> String {
    let records: Arc<Mutex<HashMap<String, (String, String)>>> = Arc::default();
    let next = Arc::new(std::sync::atomic::AtomicU64::new(1));
    let handler = move |uri: Uri, headers: HeaderMap| async move {
        let field = |n: &str| headers.get(n).map(|v| v.to_str().unwrap_or("").to_owned());
        let Some(key) = field("idempotency-key") else {
            return StatusCode::BAD_REQUEST.into_response();
        };
        let owner = format!(
            "{} {}",
            field("authorization").unwrap_or_default(),
            uri.path()
        );
        let mut records = records.lock().unwrap();
        let id = match records.get(&key) {
            Some((o, id)) if *o == owner => id.clone(),
            _ => {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let id = format!("{}/pay_{n}", uri.path());
                records.insert(key, (owner, id.clone()));
                id
            }
        };
        let headers = [("content-type", "application/json"), ("location", &id)];
        (StatusCode::CREATED, headers, r#"{"status":"created"}"#).into_response()
    };
    let app = Router::new()
        .route("/payments", post(handler.clone()))
        .route("/refunds", post(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_taken_over_by_another_principal_or_route_fails() {
    let base = overwriting().await;
    let dir = tempfile::tempdir().unwrap();
    let mut words = vec!["--id-pointer", "", "--profile", "ietf"];
    let second = format!("{base}/refunds");
    words.extend(["--second-principal-header", "Authorization: Bearer bob"]);
    words.extend(["--second-url", &second]);
    let mut a = args(&dir, &format!("{base}/payments"), &words);
    a.id_pointer = None; // ids from Location
    let report = probe(&a).await;
    // The constant body is not taken for the first answer: the ids differ. The two first
    // requests go at once, so whichever wrote last took the record, and the other's
    // retry runs again.
    for (name, whose) in [
        ("second-principal", "the second principal's"),
        ("second-route", "the other operation's"),
    ] {
        let detail = failed(&report, name);
        let first = format!("after {whose} request, the first request's retry: ran twice");
        let either = detail.starts_with(&first) || detail.starts_with("ran twice: one key");
        assert!(either, "{name}: {detail}");
        assert!(detail.contains("/pay_"), "{name}: {detail}");
    }
    // What it keeps alone: a replay of the same request.
    let replay = report.scenario("replay-same-request").unwrap();
    assert_eq!(
        replay.status,
        idemgate_probe::Status::Passed,
        "{}",
        replay.detail
    );
}

/// A server (raw HTTP/1.1, a connection per request) that runs every new key and writes
/// its answer, but keeps the record only when the client had not closed its side by then.
async fn forgetting() -> String {
    let records: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        for n in 1.. {
            let (mut tcp, _) = listener.accept().await.unwrap();
            let records = records.clone();
            tokio::spawn(async move {
                let Some((key, left)) = read_request(&mut tcp).await else {
                    return;
                };
                let id = {
                    let mut records = records.lock().unwrap();
                    match records.get(&key) {
                        Some(id) => id.clone(),
                        None if left => format!("pay_{n}"),
                        None => records.entry(key).or_insert(format!("pay_{n}")).clone(),
                    }
                };
                let body = format!(r#"{{"id":"{id}"}}"#);
                let head = format!(
                    "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = tcp.write_all(format!("{head}{body}").as_bytes()).await;
            });
        }
    });
    base
}

/// The request's key, and whether the client closed its side within 50 ms of sending it
/// whole (`None` for a request without a key or not read whole).
async fn read_request(tcp: &mut tokio::net::TcpStream) -> Option<(String, bool)> {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    let (head, length) = loop {
        let n = tcp.read(&mut buf).await.ok().filter(|n| *n > 0)?;
        bytes.extend_from_slice(&buf[..n]);
        if let Some(at) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&bytes[..at]).to_ascii_lowercase();
            let length = field(&head, "content-length").and_then(|l| l.parse().ok());
            break (head, at + 4 + length.unwrap_or(0));
        }
    };
    while bytes.len() < length {
        let n = tcp.read(&mut buf).await.ok().filter(|n| *n > 0)?;
        bytes.extend_from_slice(&buf[..n]);
    }
    let key = field(&head, "idempotency-key")?;
    let eof = tokio::time::timeout(std::time::Duration::from_millis(50), tcp.read(&mut buf));
    Some((key, matches!(eof.await, Ok(Ok(0)))))
}

fn field(head: &str, name: &str) -> Option<String> {
    head.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_forgotten_when_its_client_left_fails() {
    let base = forgetting().await;
    let dir = tempfile::tempdir().unwrap();
    // Without a replay marker (draft-07 has none), only the abandoned answer shows the run.
    let a = args(&dir, &format!("{base}/payments"), &["--profile", "ietf"]);
    let report = probe(&a).await;
    let detail = failed(&report, "disconnect-then-retry");
    assert!(
        detail.starts_with("ran twice: the abandoned request ran (id pay_"),
        "{detail}"
    );
    let replay = report.scenario("replay-same-request").unwrap();
    assert_eq!(
        replay.status,
        idemgate_probe::Status::Passed,
        "{}",
        replay.detail
    );
}

/// Accepts connections and never answers.
async fn silent() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            held.push(tcp);
        }
    });
    base
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_api_ends_the_run_incomplete() {
    let base = silent().await;
    let dir = tempfile::tempdir().unwrap();
    // The first request's own timeout: nothing else can be judged.
    let a = args(
        &dir,
        &format!("{base}/payments"),
        &["--request-timeout", "1s"],
    );
    let report = probe(&a).await;
    let why = report.incomplete.as_deref().unwrap_or("");
    assert!(
        why.starts_with("first-request failed: the first request of a new key got no answer: no answer within 1s"),
        "{why}"
    );
    // The run's deadline cuts a scenario off mid-way (the first waits 30 s per request).
    let words = ["--timeout", "2s"];
    let report = probe(&args(&dir, &format!("{base}/payments"), &words)).await;
    assert_eq!(report.incomplete.as_deref(), Some("--timeout (2s) passed"));
    let first = report.scenario("first-request").unwrap();
    assert!(
        first.detail.starts_with("cut off: --timeout (2s) passed"),
        "{}",
        first.detail
    );
    assert!(report.scenarios[1..]
        .iter()
        .all(|s| s.status == idemgate_probe::Status::Skipped));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["incomplete"], "--timeout (2s) passed");
}
