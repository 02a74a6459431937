//! Duplicates racing, clients leaving, and upstreams slower than the lease.

use std::time::Duration;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_duplicates_run_once() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("idemgate.db").display());
    let gw = gateway(&up.base, &store, |_| {}).await;
    let k = key();
    let tasks: Vec<_> = (0..50)
        .map(|_| tokio::spawn(post(&gw.base, "/payments?delay_ms=300", Some(&k), "{}").send()))
        .collect();
    let (mut created, mut conflicts, mut replays) = (0, 0, 0);
    for t in tasks {
        let resp = t.await.unwrap().unwrap();
        match (
            resp.status().as_u16(),
            resp.headers().get("idempotent-replayed"),
        ) {
            (201, None) => created += 1,
            (201, Some(_)) => replays += 1,
            (409, _) => conflicts += 1,
            (s, _) => panic!("unexpected status {s}"),
        }
    }
    assert_eq!(created, 1);
    assert_eq!(created + conflicts + replays, 50);
    assert_eq!(up.count(), 1);
}

#[tokio::test]
async fn a_client_that_disconnects_gets_the_replay_on_retry() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let k = key();
    let gone = post(&gw.base, "/payments?delay_ms=500", Some(&k), "{}")
        .timeout(Duration::from_millis(100))
        .send()
        .await;
    assert!(gone.unwrap_err().is_timeout(), "the client hung up");
    // the forwarded operation and its outcome write run on without the client
    tokio::time::sleep(Duration::from_millis(800)).await;
    let retry = post(&gw.base, "/payments?delay_ms=500", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(up.count(), 1);
}

#[tokio::test]
async fn an_upstream_slower_than_the_lease_is_never_run_twice() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |c| {
        c.defaults.set("lease_ttl", "300ms")
    })
    .await;
    let k = key();
    let first = tokio::spawn(post(&gw.base, "/payments?delay_ms=1500", Some(&k), "{}").send());
    tokio::time::sleep(Duration::from_millis(100)).await;
    // retries well past several lease lengths keep getting 409: the holder renews
    for _ in 0..6 {
        let resp = post(&gw.base, "/payments?delay_ms=1500", Some(&k), "{}")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 409);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(first.await.unwrap().unwrap().status(), 201);
    let replay = post(&gw.base, "/payments?delay_ms=1500", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(up.count(), 1);
}

/// DESIGN.md's duplicate storm: 1,000 concurrent copies of one key run once, with no 5xx,
/// while unrelated requests go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_a_thousand_duplicates_runs_once() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("idemgate.db").display());
    let gw = gateway(&up.base, &store, |_| {}).await;
    let http = client();
    let storm_key = key();
    let send = |k: String, path: &'static str| {
        let req = http
            .post(format!("{}{path}", gw.base))
            .header("authorization", "Bearer alice")
            .header("content-type", "application/json")
            .header("idempotency-key", k)
            .body("{}");
        tokio::spawn(async move { req.send().await.map(|r| r.status().as_u16()) })
    };
    let storm: Vec<_> = (0..1000)
        .map(|_| send(storm_key.clone(), "/payments?delay_ms=500"))
        .collect();
    let unrelated: Vec<_> = (0..20).map(|_| send(key(), "/orders")).collect();
    for t in unrelated {
        assert_eq!(
            t.await.unwrap().unwrap(),
            201,
            "unrelated traffic is unaffected"
        );
    }
    let (mut created, mut conflicts) = (0, 0);
    for t in storm {
        match t.await.unwrap().unwrap() {
            201 => created += 1,
            409 => conflicts += 1,
            s => panic!("storm request got {s}"),
        }
    }
    assert!(created >= 1, "the first request succeeded");
    assert_eq!(created + conflicts, 1000);
    assert_eq!(
        up.count(),
        21,
        "one execution for the storm key, one per unrelated request"
    );
}
