//! Per-principal limits in the gateway: one caller's burst of new keys is cut at its limit
//! while other callers go on; replays do not use up the rate; limits off change nothing.

use futures_util::future::join_all;
use idemgate_gateway::config::RouteTable;

use crate::support::*;

/// A POST to `path` as `who` with `key`.
fn post_as(base: &str, path: &str, who: &str, key: &str) -> reqwest::RequestBuilder {
    client()
        .post(format!("{base}{path}"))
        .header("authorization", format!("Bearer {who}"))
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body("{}")
}

/// A gateway whose `POST /limited` lets each caller start `burst` new keys, then one per
/// 100 s.
async fn limited_gateway(up: &Upstream, burst: u32) -> Gateway {
    gateway(&up.base, "memory://", |c| {
        c.routes.push(
            RouteTable::route("POST /limited")
                .with("new_keys_per_second_per_principal", 0.01)
                .with("new_keys_burst_per_principal", burst)
                .with("max_in_flight_per_principal", 100),
        )
    })
    .await
}

#[tokio::test]
async fn a_burst_beyond_the_limit_gets_429_and_other_callers_go_on() {
    let up = upstream().await;
    let gw = limited_gateway(&up, 3).await;
    let burst = (0..12).map(|_| post_as(&gw.base, "/limited", "mallory", &key()).send());
    let mut admitted = 0;
    for resp in join_all(burst).await {
        let resp = resp.unwrap();
        if resp.status() == 201 {
            admitted += 1;
            continue;
        }
        let retry_after: u64 = resp.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=100).contains(&retry_after), "{retry_after}");
        let body = assert_problem(resp, 429, "principal-limited").await;
        assert!(body["detail"]
            .as_str()
            .unwrap()
            .contains("nothing was stored"));
    }
    assert_eq!(admitted, 3);
    assert_eq!(up.count(), 3, "the upstream saw exactly the admitted ones");
    // Another caller is admitted, on the same route, while mallory is limited.
    for _ in 0..3 {
        let resp = post_as(&gw.base, "/limited", "alice", &key())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
    }
    assert_eq!(up.count(), 6);
    // Mallory's limit is on this route only.
    let other = post_as(&gw.base, "/payments", "mallory", &key()).send();
    assert_eq!(other.await.unwrap().status(), 201);
    let metrics = client()
        .get(format!("{}/metrics", gw.admin))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("idempotency_limited_total")
                && l.contains("limit=\"new_keys\"")
                && l.contains("route=\"POST /limited\"")),
        "{metrics}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn replays_of_completed_keys_do_not_use_up_the_rate() {
    let up = upstream().await;
    let gw = limited_gateway(&up, 2).await;
    let k = key();
    let first = post_as(&gw.base, "/limited", "alice", &k)
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 201);
    let first_body = first.text().await.unwrap();
    for _ in 0..10 {
        let replay = post_as(&gw.base, "/limited", "alice", &k)
            .send()
            .await
            .unwrap();
        assert_eq!(replay.status(), 201);
        assert_eq!(replay.headers()["idempotent-replayed"], "true");
        assert_eq!(replay.text().await.unwrap(), first_body);
    }
    assert_eq!(up.count(), 1);
    // Ten replays later the second token is still there; the third new key is refused.
    let second = post_as(&gw.base, "/limited", "alice", &key()).send();
    assert_eq!(second.await.unwrap().status(), 201);
    let third = post_as(&gw.base, "/limited", "alice", &key()).send();
    assert_problem(third.await.unwrap(), 429, "principal-limited").await;
    assert_eq!(up.count(), 2);
    gw.stop().await;
}

#[tokio::test]
async fn with_limits_off_a_burst_is_all_admitted() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let burst = (0..40).map(|_| post_as(&gw.base, "/limited", "mallory", &key()).send());
    for resp in join_all(burst).await {
        assert_eq!(resp.unwrap().status(), 201);
    }
    assert_eq!(up.count(), 40);
    gw.stop().await;
}
