//! Clients: each sends one key's request and retries it, to any gateway, giving up on an
//! answer after a seeded timeout (a disconnect: the layer's work goes on without it).

use std::sync::Arc;

use http::Request;
use http_body_util::BodyExt;
use idemgate_tower::body::full;
use tower::ServiceExt;

use crate::gateway::Slot;
use crate::rng::Rng;
use crate::slot::Shared;

/// One answer a client got.
#[derive(Clone, Debug)]
pub struct Got {
    /// The key.
    pub key: String,
    /// The status.
    pub status: u16,
    /// Marked `Idempotent-Replayed: true`.
    pub replayed: bool,
    /// The body.
    pub body: bytes::Bytes,
}

/// One client: `sends` tries of `route` with `key`.
pub async fn client(
    shared: Arc<Shared>,
    slots: Arc<Vec<Slot>>,
    key: String,
    route: &'static str,
    sends: u64,
) -> Vec<Got> {
    let (rng, cluster) = (&shared.rng, &shared.cluster);
    let mut got = Vec::new();
    for _ in 0..sends {
        tokio::time::sleep(rng.millis(0, 6_000)).await;
        let slot = &slots[rng.below(slots.len() as u64) as usize];
        let Some(instance) = slot.current() else {
            cluster.trace(format!("client {key} refused"));
            continue;
        };
        let timeout = match rng.chance(25) {
            true => rng.millis(10, 3_000),
            false => rng.millis(30_000, 60_000),
        };
        let answer = tokio::time::timeout(timeout, instance.svc.oneshot(request(&key, route)));
        let Ok(Ok(response)) = answer.await else {
            cluster.fault("client disconnects");
            continue;
        };
        let status = response.status().as_u16();
        let replayed = response.headers().contains_key("idempotent-replayed");
        let collected = tokio::time::timeout(timeout, response.into_body().collect()).await;
        let Ok(Ok(body)) = collected else {
            cluster.fault("client disconnects");
            continue;
        };
        let body = body.to_bytes();
        cluster.trace(format!(
            "client {key} got {status} replayed {replayed} {body:?}"
        ));
        got.push(Got {
            key: key.clone(),
            status,
            replayed,
            body,
        });
        if status < 300 && !rng.chance(30) {
            break;
        }
    }
    got
}

fn request(key: &str, route: &str) -> Request<idemgate_tower::body::BoxBody> {
    Request::post(route)
        .header("idempotency-key", key)
        .header("x-user", "alice")
        .header("content-type", "application/json")
        .body(full(r#"{"amount": 1000}"#.into()))
        .expect("a valid request")
}

/// A client's key for key number `n` of `seed`.
pub fn key_name(seed: u64, n: u64) -> String {
    format!("key-{seed:016x}-{n}")
}

/// Draws one of the two routes: `/to` (take-overs) for about a third of the keys.
pub fn route(rng: &Rng) -> &'static str {
    match rng.chance(50) {
        true => "/to",
        false => "/pay",
    }
}
