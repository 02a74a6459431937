//! The contract's edges through the gateway: what makes a scope and a request, and the
//! reserved headers.

use crate::support::*;

#[tokio::test]
async fn scope_is_principal_route_and_key() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let k = key();
    post(&gw.base, "/payments", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    let bob = post(&gw.base, "/payments", Some(&k), "{}")
        .header("authorization", "Bearer bob")
        .send()
        .await
        .unwrap();
    assert!(bob.headers().get("idempotent-replayed").is_none());
    let refunds = post(&gw.base, "/refunds", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert!(refunds.headers().get("idempotent-replayed").is_none());
    assert_eq!(up.count(), 3);
}

#[tokio::test]
async fn reserved_headers_are_stripped_and_the_key_forwarded() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let k = key();
    let resp = post(&gw.base, "/payments", Some(&k), "{}")
        .header("idempotent-replayed", "true")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let seen = up.last_headers();
    assert!(seen.get("idempotent-replayed").is_none());
    assert_eq!(seen["idempotency-key"], k.as_str());
}

#[tokio::test]
async fn requests_an_upstream_reads_differently_never_share_a_fingerprint() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    // the same bytes as text/plain and as JSON (raw-hashed: a duplicate member)
    let k = key();
    let body = r#"{"amount":1,"amount":2}"#;
    let first = client()
        .post(format!("{}/payments", gw.base))
        .header("authorization", "Bearer alice")
        .header("content-type", "text/plain")
        .header("idempotency-key", &k)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 201);
    let resp = post(&gw.base, "/payments", Some(&k), body)
        .send()
        .await
        .unwrap();
    assert_problem(resp, 422, "fingerprint-mismatch").await;
    // equal as doubles, different to an exact reader
    for (a, b) in [
        ("1000.0", "1000"),
        ("1e3", "1000"),
        ("9007199254740993", "9007199254740992"),
    ] {
        let k = key();
        let first = post(
            &gw.base,
            "/payments",
            Some(&k),
            &format!(r#"{{"amount":{a}}}"#),
        )
        .send()
        .await
        .unwrap();
        assert_eq!(first.status(), 201);
        let resp = post(
            &gw.base,
            "/payments",
            Some(&k),
            &format!(r#"{{"amount":{b}}}"#),
        )
        .send()
        .await
        .unwrap();
        assert_problem(resp, 422, "fingerprint-mismatch").await;
    }
    assert_eq!(up.count(), 4);
}

#[tokio::test]
async fn an_empty_authorization_header_is_no_principal() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let resp = client()
        .post(format!("{}/payments", gw.base))
        .header("authorization", "")
        .header("idempotency-key", key())
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_problem(resp, 401, "missing-principal").await;
    assert_eq!(up.count(), 0);
}

#[tokio::test]
async fn idempotent_replayed_is_stripped_from_every_forwarded_request() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    for method in [reqwest::Method::POST, reqwest::Method::GET] {
        client()
            .request(method, format!("{}/payments", gw.base))
            .header("idempotent-replayed", "true")
            .send()
            .await
            .unwrap();
        assert!(up.last_headers().get("idempotent-replayed").is_none());
    }
}
