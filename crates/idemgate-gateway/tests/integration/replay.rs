//! What a replay holds, what is never kept, and replay after a restart.

use crate::support::*;

#[tokio::test]
async fn replay_is_byte_identical_with_hygiene() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let k = key();
    let first = post(&gw.base, "/payments", Some(&k), r#"{"amount":1}"#)
        .send()
        .await
        .unwrap();
    let first_headers = first.headers().clone();
    let first_body = first.bytes().await.unwrap();
    assert!(
        first_headers.get("set-cookie").is_some(),
        "the first client gets the cookie"
    );
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let replay = post(&gw.base, "/payments", Some(&k), r#"{"amount":1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(replay.status(), 201);
    let h = replay.headers().clone();
    assert_eq!(h["idempotent-replayed"], "true");
    for name in ["location", "etag", "content-type", "x-upstream"] {
        assert_eq!(h[name], first_headers[name], "{name}");
    }
    assert!(
        h.get("set-cookie").is_none(),
        "Set-Cookie is never replayed"
    );
    assert_ne!(h["date"], first_headers["date"], "Date is fresh");
    let body = replay.bytes().await.unwrap();
    assert_eq!(h["content-length"], body.len().to_string().as_str());
    assert_eq!(body, first_body);
    assert_eq!(up.count(), 1);
}

#[tokio::test]
async fn streaming_response_is_delivered_whole_and_not_kept() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let k = key();
    let first = post(&gw.base, "/events?stream=1", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(first.headers()["content-type"], "text/event-stream");
    let text = first.text().await.unwrap();
    assert_eq!(text, "data: event 0\n\ndata: event 1\n\ndata: event 2\n\n");
    let retry = post(&gw.base, "/events?stream=1", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    let body = assert_problem(retry, 410, "response-not-kept").await;
    assert!(body["detail"].as_str().unwrap().contains("ran"));
    assert_eq!(up.count(), 1);
}

#[tokio::test]
async fn response_over_the_cap_is_delivered_whole_and_not_kept() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |c| {
        c.defaults.set("max_stored_response_bytes", 1000)
    })
    .await;
    let k = key();
    let first = post(&gw.base, "/big?bytes=5000", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 201);
    let body = first.bytes().await.unwrap();
    assert_eq!(body.len(), 5000);
    assert!(body.iter().all(|&b| b == b'x'));
    let retry = post(&gw.base, "/big?bytes=5000", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_problem(retry, 410, "response-not-kept").await;
    // under the cap it is kept
    let k2 = key();
    post(&gw.base, "/big?bytes=999", Some(&k2), "{}")
        .send()
        .await
        .unwrap();
    let replay = post(&gw.base, "/big?bytes=999", Some(&k2), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.bytes().await.unwrap().len(), 999);
    assert_eq!(up.count(), 2);
}

#[tokio::test]
async fn completed_record_is_replayed_after_a_restart() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("idemgate.db").display());
    let k = key();
    let gw = gateway(&up.base, &store, |_| {}).await;
    let first = post(&gw.base, "/payments", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    let first_body = first.bytes().await.unwrap();
    gw.stop().await;

    let gw = gateway(&up.base, &store, |_| {}).await;
    let replay = post(&gw.base, "/payments", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.bytes().await.unwrap(), first_body);
    assert_eq!(up.count(), 1);
}

#[tokio::test]
async fn set_cookie_is_never_replayed_whatever_the_deny_list() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |c| {
        c.defaults.set("replay_deny_headers", vec!["x-upstream"])
    })
    .await;
    let k = key();
    let first = post(&gw.base, "/payments", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert!(first.headers().get("set-cookie").is_some());
    let replay = post(&gw.base, "/payments", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert!(replay.headers().get("set-cookie").is_none());
    assert!(
        replay.headers().get("x-upstream").is_none(),
        "the configured header is denied too"
    );
}
