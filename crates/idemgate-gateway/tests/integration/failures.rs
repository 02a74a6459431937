//! Stores and upstreams that fail, and gateways that die.

use std::time::Duration;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_store_is_503_and_nothing_is_forwarded() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemgate.db");
    let store = format!("sqlite://{}", path.display());
    let gw = gateway(&up.base, &store, |c| {
        c.routes.push(
            idemgate_gateway::config::RouteTable::route("POST /likes").with("fail_open", true),
        )
    })
    .await;
    // Warm up: the schema exists and the store answers.
    assert_eq!(
        post(&gw.base, "/payments", Some(&key()), "{}")
            .send()
            .await
            .unwrap()
            .status(),
        201
    );

    let lock = rusqlite::Connection::open(&path).unwrap();
    lock.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let k = key();
    let resp = post(&gw.base, "/payments", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert!(resp.headers().get("retry-after").is_some());
    assert_problem(resp, 503, "store-unavailable").await;
    assert_eq!(up.count(), 1, "nothing forwarded unrecorded");
    let likes = post(&gw.base, "/likes", Some(&key()), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(likes.status(), 201, "fail_open routes are forwarded");
    assert_eq!(up.count(), 2);

    lock.execute_batch("ROLLBACK").unwrap();
    let resp = post(&gw.base, "/payments", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201, "recovers without a restart");
    assert_eq!(up.count(), 3);
    let ready = client()
        .get(format!("{}/readyz", gw.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
}

#[tokio::test]
async fn connection_failure_before_sending_releases_the_key() {
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let gw = gateway(&base, "memory://", |_| {}).await;
    let k = key();
    for _ in 0..2 {
        let resp = post(&gw.base, "/payments", Some(&k), "{}")
            .send()
            .await
            .unwrap();
        // released each time: the retry is not told "previous attempt failed"
        assert_problem(resp, 502, "upstream-unreachable").await;
    }
}

#[tokio::test]
async fn upstream_failure_after_sending_fails_the_key() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let k = key();
    let resp = post(&gw.base, "/payments?broken=1", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_problem(resp, 502, "upstream-response-failed").await;
    let retry = post(&gw.base, "/payments?broken=1", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_problem(retry, 500, "previous-attempt-failed").await;
    assert_eq!(up.count(), 1);
}

#[tokio::test]
async fn upstream_timeout_is_504_and_fails_the_key() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |c| {
        c.upstream_timeout = "200ms".into()
    })
    .await;
    let k = key();
    let resp = post(&gw.base, "/payments?delay_ms=1000", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_problem(resp, 504, "upstream-timeout").await;
    let retry = post(&gw.base, "/payments?delay_ms=1000", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_problem(retry, 500, "previous-attempt-failed").await;
    assert_eq!(up.count(), 1);
}

#[tokio::test]
async fn admin_endpoints_answer() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    post(&gw.base, "/payments", Some(&key()), "{}")
        .send()
        .await
        .unwrap();
    for (path, needle) in [
        ("/healthz", "ok"),
        ("/readyz", "ready"),
        ("/metrics", "idempotency_requests_total"),
    ] {
        let resp = client()
            .get(format!("{}{path}", gw.admin))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        assert!(resp.text().await.unwrap().contains(needle), "{path}");
    }
}

/// SIGTERM drains: an operation whose client already left still finishes and records its
/// outcome before the process exits, so the retry after a restart gets the replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_waits_for_detached_operations() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemgate.toml");
    std::fs::write(
        &config,
        format!(
            "store = \"sqlite://{}\"\n",
            dir.path().join("idemgate.db").display()
        ),
    )
    .unwrap();
    let mut gw = spawn_binary(&up.base, &config).await;
    let k = key();
    let path = "/payments?delay_ms=1500";
    let gone = post(&gw.base, path, Some(&k), "{}")
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(gone.is_err(), "the client left");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &gw.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exited = tokio::task::spawn_blocking(move || {
        let code = gw.child.wait().unwrap();
        (gw, code)
    });
    let (gw, code) = tokio::time::timeout(Duration::from_secs(20), exited)
        .await
        .unwrap()
        .unwrap();
    assert!(code.success(), "clean exit: {code:?}");
    assert_eq!(up.count(), 1);
    drop(gw);

    let gw = spawn_binary(&up.base, &config).await;
    let replay = post(&gw.base, path, Some(&k), "{}").send().await.unwrap();
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(up.count(), 1);
}
