//! The gateway on `store = "idemgate://..."` against the real `idemgate key-service`
//! binary: a killed, black-holed or refusing key service is `503` and nothing is forwarded;
//! `idemgates://` over TLS.

use crate::support::key_service::*;

/// A gateway in this process on `idemgate://addr` (store deadline 1 s).
async fn gateway_on(
    up: &crate::support::Upstream,
    addr: &str,
    dir: &std::path::Path,
) -> crate::support::Gateway {
    let token = dir.join("gateway.token");
    std::fs::write(&token, TOKEN_A).unwrap();
    crate::support::gateway(&up.base, &format!("idemgate://{addr}"), |c| {
        c.store_token_file = token.display().to_string();
        c.store_timeout = "1s".into();
        c.purge_interval = "0s".into();
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn key_service_killed_is_503_within_the_timeout_and_nothing_runs_unrecorded() {
    use crate::support::{assert_problem, key, post, upstream};
    let up = upstream().await;
    let mut ks = spawn(None, None).await;
    let addr = ks.addr.clone();
    let gw = gateway_on(&up, &addr, ks.dir.path()).await;
    let first = key();
    let resp = post(&gw.base, "/payments", Some(&first), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(up.count(), 1);

    ks.kill(); // SIGKILL: a crash, not a shutdown
    for k in [key(), first.clone()] {
        let started = tokio::time::Instant::now();
        let resp = post(&gw.base, "/payments", Some(&k), "{}")
            .send()
            .await
            .unwrap();
        assert_problem(resp, 503, "store-unavailable").await;
        // Bounded by the store deadline (1 s), with room for a loaded machine.
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
    assert_eq!(
        up.count(),
        1,
        "nothing was forwarded while the key service was down"
    );

    // Back on the same file: the first key replays, nothing runs twice.
    let config = ks.dir.path().join("ks.toml");
    let child = start(&config);
    wait_for(&addr).await;
    let restarted = KeyServiceProcess {
        child,
        addr: addr.clone(),
        dir: tempfile::tempdir().unwrap(),
    };
    let resp = post(&gw.base, "/payments", Some(&first), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(resp.headers()["idempotent-replayed"], "true");
    assert_eq!(up.count(), 1);
    drop(restarted);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_service_that_never_answers_is_503_and_nothing_runs() {
    use crate::support::{assert_problem, key, post, upstream, Relay};
    let up = upstream().await;
    let ks = spawn(None, None).await;
    let relay = Relay::start(&ks.addr).await;
    let via = format!("127.0.0.1:{}", relay.port);
    let gw = gateway_on(&up, &via, ks.dir.path()).await;
    let resp = post(&gw.base, "/payments", Some(&key()), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    relay.black_hole();
    let started = tokio::time::Instant::now();
    let resp = post(&gw.base, "/payments", Some(&key()), "{}")
        .send()
        .await
        .unwrap();
    assert_problem(resp, 503, "store-unavailable").await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(up.count(), 1);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_with_a_wrong_token_fails_closed() {
    use crate::support::{assert_problem, key, post, upstream};
    let up = upstream().await;
    let ks = spawn(None, None).await;
    let token = ks.dir.path().join("wrong.token");
    std::fs::write(&token, "not-a-client").unwrap();
    let gw = crate::support::gateway(&up.base, &format!("idemgate://{}", ks.addr), |c| {
        c.store_token_file = token.display().to_string();
    })
    .await;
    let resp = post(&gw.base, "/payments", Some(&key()), "{}")
        .send()
        .await
        .unwrap();
    assert_problem(resp, 503, "store-unavailable").await;
    assert_eq!(up.count(), 0);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn idemgates_reaches_a_key_service_over_tls_and_an_untrusted_one_fails_closed() {
    use crate::support::{assert_problem, key, post, upstream};
    let dir = tempfile::tempdir().unwrap();
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let (cert, pem_key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&pem_key, ck.signing_key.serialize_pem()).unwrap();
    let addr = free_addr();
    let store = format!("sqlite://{}", dir.path().join("ks.db").display());
    let tls = format!(
        "tls_cert_file = \"{}\"\ntls_key_file = \"{}\"",
        cert.display(),
        pem_key.display()
    );
    let config = dir.path().join("ks.toml");
    std::fs::write(&config, config_text(&store, &addr, &tls)).unwrap();
    let child = start(&config);
    wait_for(&addr).await;
    let port = addr.rsplit(':').next().unwrap().to_owned();
    let ks = KeyServiceProcess { child, addr, dir };
    let token = ks.dir.path().join("token");
    std::fs::write(&token, TOKEN_A).unwrap();
    let up = upstream().await;
    let token = token.display().to_string();
    let on = |url: String, ca: Option<String>| {
        let (base, token) = (up.base.clone(), token.clone());
        async move {
            crate::support::gateway(&base, &url, move |c| {
                c.store_token_file = token;
                c.store_ca_file = ca.unwrap_or_default();
            })
            .await
        }
    };
    let trusted = on(
        format!("idemgates://localhost:{port}"),
        Some(cert.display().to_string()),
    )
    .await;
    let k = key();
    for replayed in [false, true] {
        let resp = post(&trusted.base, "/payments", Some(&k), "{}")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
        assert_eq!(resp.headers().contains_key("idempotent-replayed"), replayed);
    }
    assert_eq!(up.count(), 1);
    // Not trusted (system roots), or plain HTTP to the TLS port: 503, nothing forwarded.
    for (url, ca) in [
        (format!("idemgates://localhost:{port}"), None),
        (format!("idemgate://localhost:{port}"), None),
    ] {
        let gw = on(url, ca).await;
        let resp = post(&gw.base, "/payments", Some(&key()), "{}")
            .send()
            .await
            .unwrap();
        assert_problem(resp, 503, "store-unavailable").await;
        gw.stop().await;
    }
    assert_eq!(up.count(), 1);
    trusted.stop().await;
    drop(ks);
}

/// A response the key service refuses to keep (over its `max_request_bytes` once encoded)
/// is a final answer: the first client gets it whole, the key completes as not replayable
/// (retries get `410`), the operation never runs again, and the gateway's outcome queue
/// does not fill with writes retried forever (later keys are served).
#[tokio::test(flavor = "multi_thread")]
async fn a_response_the_key_service_refuses_completes_as_not_kept() {
    use crate::support::{assert_problem, key, post, upstream};
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let sqlite = format!("sqlite://{}", dir.path().join("ks.db").display());
    let text = config_text(&sqlite, &addr, "purge_interval = \"0s\"").replace(
        "admin_listen = \"\"\n",
        "admin_listen = \"\"\nmax_request_bytes = 65536\n",
    );
    let config = dir.path().join("ks.toml");
    std::fs::write(&config, text).unwrap();
    let child = start(&config);
    wait_for(&addr).await;
    let ks = KeyServiceProcess { child, addr, dir };
    let gw = gateway_on(&up, &ks.addr, ks.dir.path()).await;

    let big = key();
    let resp = post(&gw.base, "/payments?bytes=200000", Some(&big), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(resp.bytes().await.unwrap().len(), 200_000);
    // The client's answer may come before the outcome write lands (the store deadline is
    // 1 s): retries see `409` until then, and `410` from then on, never a second run.
    let mut kept = 0;
    for _ in 0..100 {
        let retry = post(&gw.base, "/payments?bytes=200000", Some(&big), "{}")
            .send()
            .await
            .unwrap();
        if retry.status() == 409 {
            assert_eq!(kept, 0, "409 after the key completed");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        }
        assert_problem(retry, 410, "response-not-kept").await;
        kept += 1;
        if kept == 3 {
            break;
        }
    }
    assert_eq!(kept, 3, "the key never completed as not kept");
    assert_eq!(up.count(), 1, "the operation ran once");

    let small = key();
    let resp = post(&gw.base, "/payments", Some(&small), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(up.count(), 2);
    drop(ks);
    gw.stop().await;
}

/// `POST /v1/wait` on `base` as `token`: its answer.
async fn wait_call(
    base: &str,
    token: &str,
    after: serde_json::Value,
    wait_ms: u64,
) -> serde_json::Value {
    let body = serde_json::json!({ "after": after, "wait_ms": wait_ms });
    let resp = reqwest::Client::new()
        .post(format!("{base}/v1/wait"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

/// Two gateways on one key service: a waiter on one hears the other's outcome through the
/// key service (`/v1/store/announce`, then the long-poll `/v1/wait`), within a `max_wait`
/// shorter than the slow poll; a caller of the same namespace sees the events, another
/// namespace's does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_split_across_two_gateways_on_a_key_service_wait_for_one_run() {
    let _serial = crate::waits::GAUGE.lock().await;
    let ks = spawn(None, None).await;
    let token = ks.dir.path().join("gateway.token");
    std::fs::write(&token, TOKEN_A).unwrap();
    let base = ks.base();
    let alpha = wait_call(&base, TOKEN_A, serde_json::Value::Null, 0).await;
    let beta = wait_call(&base, TOKEN_B, serde_json::Value::Null, 0).await;
    let watch = {
        let (base, cursor) = (base.clone(), alpha["cursor"].clone());
        tokio::spawn(async move { wait_call(&base, TOKEN_A, cursor, 10_000).await })
    };
    let store = format!("idemgate://{}", ks.addr);
    crate::waits::split_across_two_gateways(&store, |c| {
        c.store_token_file = token.display().to_string();
    })
    .await;
    let seen = watch.await.unwrap();
    let events = seen["events"].as_array().unwrap();
    assert!(
        events.iter().any(|e| e.as_str().unwrap().starts_with("w ")),
        "{seen}"
    );
    let other = wait_call(&base, TOKEN_B, beta["cursor"].clone(), 0).await;
    assert_eq!(other["events"], serde_json::json!([]), "{other}");
    assert_eq!(other["missed"], false);
    let http = reqwest::Client::new();
    for (path, body) in [
        (
            "/v1/wait",
            serde_json::json!({ "after": null, "wait_ms": 30_001 }),
        ),
        (
            "/v1/store/announce",
            serde_json::json!({ "event": "w not-hex" }),
        ),
    ] {
        let resp = http
            .post(format!("{base}{path}"))
            .bearer_auth(TOKEN_A)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{path}");
    }
}
