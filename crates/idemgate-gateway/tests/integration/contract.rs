//! Every row of the DESIGN.md contract table, through the gateway.

use std::time::Duration;

// The support module, or one whose gateways keep their records in a key service.
use super::contract_support::*;

#[tokio::test]
async fn uncovered_methods_pass_through_untouched() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    for method in [
        reqwest::Method::GET,
        reqwest::Method::PUT,
        reqwest::Method::DELETE,
    ] {
        for _ in 0..2 {
            let resp = client()
                .request(method.clone(), format!("{}/things/1", gw.base))
                .header("idempotency-key", "bad") // malformed, but not our business here
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 201);
            assert!(resp.headers().get("idempotent-replayed").is_none());
        }
    }
    assert_eq!(up.count(), 6);
}

#[tokio::test]
async fn no_key_on_an_optional_route_passes_through_unrecorded() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    for _ in 0..2 {
        let resp = post(&gw.base, "/payments", None, "{}")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
    }
    assert_eq!(up.count(), 2);
}

#[tokio::test]
async fn no_key_on_a_required_route_is_400() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |c| {
        c.routes.push(
            idemgate_gateway::config::RouteTable::route("POST /payments")
                .with("key_required", true),
        )
    })
    .await;
    let resp = post(&gw.base, "/payments", None, "{}")
        .send()
        .await
        .unwrap();
    let body = assert_problem(resp, 400, "missing-key").await;
    assert!(body["detail"].as_str().unwrap().contains("idempotency-key"));
    // other paths keep the default (optional)
    let resp = post(&gw.base, "/other", None, "{}").send().await.unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(up.count(), 1);
}

#[tokio::test]
async fn malformed_keys_are_400_naming_the_rule() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let cases: &[(&[&str], &str)] = &[
        (&["short"], "at least 8"),
        (&[&"x".repeat(129)], "at most 128"),
        (&["\"\""], "empty"),
        (&["\" abcdefgh\""], "space"),
        (&["abcdefgh, ijklmnop"], "merged"),
        (&["abcdefgh", "abcdefgh"], "2 times"),
        (&["\"abcdefgh"], "sf-string"),
    ];
    for (values, needle) in cases {
        let mut rb = post(&gw.base, "/payments", None, "{}");
        for v in *values {
            rb = rb.header("idempotency-key", *v);
        }
        let body = assert_problem(rb.send().await.unwrap(), 400, "invalid-key").await;
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.contains(needle), "{values:?}: {detail}");
    }
    // a non-ASCII byte
    let resp = post(&gw.base, "/payments", None, "{}")
        .header(
            "idempotency-key",
            reqwest::header::HeaderValue::from_bytes(b"abcd\xe9fghij").unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_problem(resp, 400, "invalid-key").await;
    assert_eq!(up.count(), 0);
}

#[tokio::test]
async fn no_principal_is_401_unless_anonymous_is_allowed() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let resp = client()
        .post(format!("{}/payments", gw.base))
        .header("idempotency-key", key())
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_problem(resp, 401, "missing-principal").await;
    assert_eq!(up.count(), 0);

    let gw = gateway(&up.base, "memory://", |c| {
        c.defaults.set("allow_anonymous", true)
    })
    .await;
    let k = key();
    for _ in 0..2 {
        let resp = client()
            .post(format!("{}/payments", gw.base))
            .header("idempotency-key", &k)
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
    }
    assert_eq!(up.count(), 1);
}

#[tokio::test]
async fn first_runs_once_and_retries_replay() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let k = key();
    let first = post(
        &gw.base,
        "/payments",
        Some(&k),
        r#"{"amount":10,"currency":"EUR"}"#,
    )
    .send()
    .await
    .unwrap();
    assert_eq!(first.status(), 201);
    assert!(first.headers().get("idempotent-replayed").is_none());
    // member order and whitespace do not make a different request
    let retry = post(
        &gw.base,
        "/payments",
        Some(&k),
        r#"{ "currency": "EUR", "amount": 10 }"#,
    )
    .send()
    .await
    .unwrap();
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(up.count(), 1);
}

#[tokio::test]
async fn in_flight_duplicate_is_409_with_retry_after() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let k = key();
    let first = tokio::spawn(post(&gw.base, "/payments?delay_ms=800", Some(&k), "{}").send());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let dup = post(&gw.base, "/payments?delay_ms=800", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert!(dup.headers().get("retry-after").is_some());
    assert_problem(dup, 409, "request-in-flight").await;
    assert_eq!(first.await.unwrap().unwrap().status(), 201);
    assert_eq!(up.count(), 1);
}

#[tokio::test]
async fn different_fingerprint_is_422_and_leaves_the_record() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let k = key();
    let first = post(&gw.base, "/payments", Some(&k), r#"{"amount":10}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 201);
    for (path, body) in [
        ("/payments", r#"{"amount":11}"#),
        ("/payments?x=1", r#"{"amount":10}"#),
    ] {
        let resp = post(&gw.base, path, Some(&k), body).send().await.unwrap();
        assert_problem(resp, 422, "fingerprint-mismatch").await;
    }
    let retry = post(&gw.base, "/payments", Some(&k), r#"{"amount":10}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(up.count(), 1);

    let gw = gateway(&up.base, "memory://", |c| {
        c.defaults.set("mismatch_status", 400)
    })
    .await;
    post(&gw.base, "/payments", Some(&k), r#"{"amount":10}"#)
        .send()
        .await
        .unwrap();
    let resp = post(&gw.base, "/payments", Some(&k), r#"{"amount":11}"#)
        .send()
        .await
        .unwrap();
    assert_problem(resp, 400, "fingerprint-mismatch").await;
}

#[tokio::test]
async fn failed_record_is_500_and_never_reruns() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let k = key();
    let first = post(&gw.base, "/payments?status=500", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 500);
    let retry = post(&gw.base, "/payments?status=500", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_problem(retry, 500, "previous-attempt-failed").await;
    assert_eq!(up.count(), 1);
}

#[tokio::test]
async fn nothing_done_statuses_release_the_key() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    for status in [408, 425, 429, 503] {
        let k = key();
        let path = format!("/payments?status={status}");
        for _ in 0..2 {
            let resp = post(&gw.base, &path, Some(&k), "{}").send().await.unwrap();
            assert_eq!(resp.status().as_u16(), status);
            assert!(resp.headers().get("idempotent-replayed").is_none());
        }
    }
    assert_eq!(up.count(), 8, "each retry of a released key runs again");
}

/// An upstream `401` with `WWW-Authenticate` (an authentication challenge, answered before
/// the operation ran) releases the key: the retry after a token refresh runs and its `201`
/// is stored. A `401` without it is the API's own answer: stored and replayed. (The same
/// `Authorization` on every attempt: a `jwt:` or `header:` principal keeps the scope across
/// a refresh, and the status rule alone decides.)
#[tokio::test]
async fn a_401_releases_the_key_only_with_a_challenge() {
    for (challenge, runs) in [(true, 2), (false, 1)] {
        let up = upstream().await;
        let gw = memory_gateway(&up).await;
        let (k, extra) = (key(), if challenge { "&challenge=1" } else { "" });
        let path = format!("/payments?first_status=401{extra}");
        let send = || post(&gw.base, &path, Some(&k), "{}").send();
        let first = send().await.unwrap();
        assert_eq!(first.status(), 401);
        assert_eq!(first.headers().contains_key("www-authenticate"), challenge);
        for attempt in 2..=3 {
            let retry = send().await.unwrap();
            let replayed = retry.headers().get("idempotent-replayed").is_some();
            let (status, body) = (retry.status(), retry.text().await.unwrap());
            let want = match challenge {
                true => (201, attempt == 3, r#""execution":2"#),
                false => (401, true, r#""execution":1"#),
            };
            assert_eq!((status.as_u16(), replayed), (want.0, want.1), "{attempt}");
            assert!(body.contains(want.2), "{attempt}: {body}");
        }
        assert_eq!(up.count(), runs, "challenge: {challenge}");
    }
}

#[tokio::test]
async fn client_errors_are_stored_and_replayed() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let k = key();
    for _ in 0..2 {
        let resp = post(&gw.base, "/payments?status=402", Some(&k), "{}")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 402);
    }
    assert_eq!(up.count(), 1);
}

#[tokio::test]
async fn expired_key_is_treated_as_new() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |c| {
        // Long enough for the first request and its replay on a loaded machine, also when
        // the records live in a key service (two more hops each).
        c.defaults.set("record_ttl", "2s");
        c.defaults.set("lease_ttl", "100ms");
    })
    .await;
    let k = key();
    post(&gw.base, "/payments", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    let replay = post(&gw.base, "/payments", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    tokio::time::sleep(Duration::from_millis(2200)).await;
    let again = post(&gw.base, "/payments", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 201);
    assert!(again.headers().get("idempotent-replayed").is_none());
    assert_eq!(up.count(), 2);
}

#[tokio::test]
async fn body_over_the_limit_is_413() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |c| {
        c.defaults.set("max_body_bytes", 1024)
    })
    .await;
    let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(2000));
    let resp = post(&gw.base, "/payments", Some(&key()), &big)
        .send()
        .await
        .unwrap();
    assert_problem(resp, 413, "body-too-large").await;
    // also without Content-Length (chunked)
    let stream =
        futures_util::stream::iter(vec![Ok::<_, std::io::Error>(big.clone().into_bytes())]);
    let resp = client()
        .post(format!("{}/payments", gw.base))
        .header("authorization", "Bearer a")
        .header("idempotency-key", key())
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
        .unwrap();
    assert_problem(resp, 413, "body-too-large").await;
    assert_eq!(up.count(), 0);
}
