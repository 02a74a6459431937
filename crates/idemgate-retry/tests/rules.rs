//! The retry rules against a scripted server that records every attempt: idemgate's `409`
//! honours `Retry-After`, `503` is retried, `outcome-unknown` stops, the key and body never
//! change, an unanswered request gives up with its key.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idemgate_retry::{IdempotentRetryLayer, RetryError, RetryPolicy};
use tower::{Service, ServiceBuilder, ServiceExt};

/// One scripted answer: status, idemgate problem name (`""`: the API's own JSON) and
/// `Retry-After`.
type Scripted = (u16, &'static str, Option<&'static str>);

/// What the server answers, in turn (the last one repeats), and what it saw.
#[derive(Clone, Default)]
struct Script {
    answers: Arc<Mutex<VecDeque<Scripted>>>,
    seen: Arc<Mutex<Vec<(String, Bytes, tokio::time::Instant)>>>,
    hang: bool,
}

async fn answer(State(s): State<Script>, headers: HeaderMap, body: Bytes) -> Response {
    let key = headers
        .get("idempotency-key")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    s.seen
        .lock()
        .unwrap()
        .push((key, body, tokio::time::Instant::now()));
    if s.hang {
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    let (status, problem, retry_after) = {
        let mut a = s.answers.lock().unwrap();
        if a.len() > 1 {
            a.pop_front().unwrap()
        } else {
            a[0]
        }
    };
    let mut resp = match problem {
        "" => (StatusCode::from_u16(status).unwrap(), r#"{"id":"pay_1"}"#).into_response(),
        name => (
            StatusCode::from_u16(status).unwrap(),
            [("content-type", "application/problem+json")],
            format!(r#"{{"type":"urn:idemgate:problem:{name}","title":"t","status":{status}}}"#),
        )
            .into_response(),
    };
    if let Some(after) = retry_after {
        resp.headers_mut()
            .insert("retry-after", after.parse().unwrap());
    }
    resp
}

async fn server(answers: &[Scripted], hang: bool) -> (String, Script) {
    let script = Script {
        answers: Arc::new(Mutex::new(answers.iter().copied().collect())),
        hang,
        ..Default::default()
    };
    let app = axum::Router::new()
        .fallback(answer)
        .with_state(script.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, script)
}

async fn send(
    base: &str,
    policy: RetryPolicy,
) -> Result<http::Response<idemgate_retry::RetryBody>, RetryError> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut client = ServiceBuilder::new()
        .layer(IdempotentRetryLayer::new(policy))
        .service(client);
    let req = http::Request::post(format!("{base}/payments"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(br#"{"amount":1}"#)))
        .unwrap();
    client.ready().await.unwrap().call(req).await
}

fn quick() -> RetryPolicy {
    RetryPolicy {
        base_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(1500),
        deadline: Duration::from_secs(10),
        ..RetryPolicy::default()
    }
}

#[tokio::test]
async fn in_flight_409_and_503_are_retried_with_the_same_key_and_body() {
    let (base, s) = server(
        &[
            (409, "request-in-flight", Some("1")),
            (503, "store-unavailable", Some("0")),
            (503, "", None),
            (201, "", None),
        ],
        false,
    )
    .await;
    let resp = send(&base, quick()).await.unwrap();
    assert_eq!(resp.status(), 201);
    let seen = s.seen.lock().unwrap();
    assert_eq!(seen.len(), 4);
    assert!(seen
        .iter()
        .all(|(k, b, _)| k == &seen[0].0 && b == &seen[0].1));
    assert_eq!(&seen[0].1[..], br#"{"amount":1}"#);
    // Retry-After: 1 was honoured before the second attempt.
    assert!(
        seen[1].2 - seen[0].2 >= Duration::from_millis(950),
        "{:?}",
        seen[1].2 - seen[0].2
    );
}

#[tokio::test]
async fn outcome_unknown_and_previous_attempt_failed_stop_at_once() {
    for name in ["outcome-unknown", "previous-attempt-failed"] {
        let (base, s) = server(&[(500, name, None), (201, "", None)], false).await;
        let resp = send(&base, quick()).await.unwrap();
        assert_eq!(resp.status(), 500, "{name}");
        assert_eq!(s.seen.lock().unwrap().len(), 1, "{name}: no retry");
    }
}

#[tokio::test]
async fn a_409_that_is_not_idemgates_is_final() {
    // Another problem type, or idemgate's name under another base, is the API's own.
    let (base, s) = server(
        &[(409, "fingerprint-mismatch", Some("1")), (201, "", None)],
        false,
    )
    .await;
    assert_eq!(send(&base, quick()).await.unwrap().status(), 409);
    assert_eq!(s.seen.lock().unwrap().len(), 1);
    let (base, s) = server(
        &[(409, "request-in-flight", Some("1")), (201, "", None)],
        false,
    )
    .await;
    let other_base = RetryPolicy {
        problem_type_base: "https://docs.example.com/errors".into(),
        ..quick()
    };
    assert_eq!(send(&base, other_base).await.unwrap().status(), 409);
    assert_eq!(s.seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn attempts_are_bounded_and_the_last_answer_is_handed_back() {
    let (base, s) = server(&[(503, "store-unavailable", Some("0"))], false).await;
    let policy = RetryPolicy {
        max_attempts: 4,
        ..quick()
    };
    assert_eq!(send(&base, policy).await.unwrap().status(), 503);
    assert_eq!(s.seen.lock().unwrap().len(), 4);
}

#[tokio::test]
async fn no_answer_gives_up_with_the_key() {
    let (base, s) = server(&[(201, "", None)], true).await;
    let policy = RetryPolicy {
        attempt_timeout: Duration::from_millis(100),
        deadline: Duration::from_millis(600),
        ..quick()
    };
    match send(&base, policy).await {
        Err(RetryError::GaveUp { attempts, key, .. }) => {
            let seen = s.seen.lock().unwrap();
            assert_eq!(attempts as usize, seen.len());
            assert!(attempts >= 2);
            assert!(seen.iter().all(|(k, _, _)| *k == key));
        }
        other => panic!("expected GaveUp, got {:?}", other.map(|r| r.status())),
    }
}

#[tokio::test]
async fn get_requests_are_sent_once_without_a_key() {
    let (base, s) = server(&[(503, "", None)], false).await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut client = ServiceBuilder::new()
        .layer(IdempotentRetryLayer::new(quick()))
        .service(client);
    let req = http::Request::get(format!("{base}/ledger"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(
        client
            .ready()
            .await
            .unwrap()
            .call(req)
            .await
            .unwrap()
            .status(),
        503
    );
    let seen = s.seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].0, "");
}

/// A `409` problem whose body never arrives: the attempt times out and is retried, and a
/// huge `Retry-After` is capped at `max_backoff`.
#[tokio::test]
async fn a_stalled_problem_body_and_a_huge_retry_after_do_not_hang_the_client() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let attempts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = attempts.clone();
    tokio::spawn(async move {
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = [0u8; 4096];
                let _ = sock.read(&mut buf).await;
                let head = "HTTP/1.1 409 Conflict\r\ncontent-type: application/problem+json\r\ncontent-length: 100\r\nretry-after: 999999999\r\n\r\n{\"type\":";
                let _ = sock.write_all(head.as_bytes()).await;
                tokio::time::sleep(Duration::from_secs(30)).await;
            });
        }
    });
    let policy = RetryPolicy {
        attempt_timeout: Duration::from_millis(200),
        deadline: Duration::from_secs(2),
        max_backoff: Duration::from_millis(100),
        ..quick()
    };
    match send(&base, policy).await {
        Err(RetryError::GaveUp { attempts: n, .. }) => {
            assert!(n >= 2, "{n}");
            assert_eq!(
                n as usize,
                attempts.load(std::sync::atomic::Ordering::SeqCst)
            );
        }
        other => panic!("expected GaveUp, got {:?}", other.map(|r| r.status())),
    }
}
