//! `record_ttl_header`: `Idempotency-Key-Lifetime` (the record TTL in seconds) on fresh and
//! replayed keyed responses, nowhere else, and never unless the route asks for it.

use idemgate_gateway::config::RouteTable;

use crate::support::{gateway, key, post, upstream};

const LIFETIME: &str = "idempotency-key-lifetime";

#[tokio::test]
async fn fresh_and_replayed_responses_state_the_record_ttl() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |c| {
        c.routes.push(
            RouteTable::route("POST /payments")
                .with("record_ttl", "90m")
                .with("record_ttl_header", true),
        );
    })
    .await;
    let k = key();
    let fresh = post(&gw.base, "/payments", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(fresh.status(), 201);
    assert_eq!(fresh.headers()[LIFETIME], "5400");
    let replay = post(&gw.base, "/payments", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.headers()[LIFETIME], "5400");
    assert_eq!(up.count(), 1);

    // Not on answers whose key is not kept, nor on idemgate's own problems, nor unkeyed.
    let released = post(&gw.base, "/payments?status=503", Some(&key()), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(released.status(), 503);
    assert!(released.headers().get(LIFETIME).is_none());
    let mismatch = post(&gw.base, "/payments", Some(&k), "{\"other\":1}")
        .send()
        .await
        .unwrap();
    assert_eq!(mismatch.status(), 422);
    assert!(mismatch.headers().get(LIFETIME).is_none());
    let unkeyed = post(&gw.base, "/payments", None, "{}")
        .send()
        .await
        .unwrap();
    assert!(unkeyed.headers().get(LIFETIME).is_none());
    // Other routes keep the default: off.
    let other = post(&gw.base, "/orders", Some(&key()), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 201);
    assert!(other.headers().get(LIFETIME).is_none());
    gw.stop().await;
}

#[tokio::test]
async fn defaults_turn_it_on_for_every_covered_request() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |c| {
        c.defaults.set("record_ttl_header", true);
        c.defaults.set("record_ttl", "2h");
    })
    .await;
    let resp = post(&gw.base, "/x", Some(&key()), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers().get_all(LIFETIME).iter().count(), 1);
    assert_eq!(resp.headers()[LIFETIME], "7200");
    gw.stop().await;
}

/// `in_flight_retry_after`: the `Retry-After` of `409 request-in-flight`, per route.
#[tokio::test]
async fn a_slow_route_asks_duplicates_to_come_back_later() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |c| {
        c.routes
            .push(RouteTable::route("POST /payments").with("in_flight_retry_after", "5s"));
    })
    .await;
    let k = key();
    let first = tokio::spawn(post(&gw.base, "/payments?delay_ms=800", Some(&k), "{}").send());
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let dup = post(&gw.base, "/payments?delay_ms=800", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(dup.status(), 409);
    assert_eq!(dup.headers()["retry-after"], "5");
    // Another route keeps the default.
    let other = key();
    let slow = tokio::spawn(post(&gw.base, "/refunds?delay_ms=800", Some(&other), "{}").send());
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let dup = post(&gw.base, "/refunds?delay_ms=800", Some(&other), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(dup.status(), 409);
    assert_eq!(dup.headers()["retry-after"], "1");
    assert_eq!(first.await.unwrap().unwrap().status(), 201);
    assert_eq!(slow.await.unwrap().unwrap().status(), 201);
    assert_eq!(up.count(), 2);
}
