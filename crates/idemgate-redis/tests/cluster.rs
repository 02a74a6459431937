//! [`RedisStore`] on Redis Cluster, gated on `IDEMGATE_TEST_REDIS_CLUSTER_URLS`
//! (comma-separated node URLs; `scripts/start-cluster.sh` starts a local three-node cluster
//! and prints the export line). The conformance suite, plus what is cluster-specific:
//! records spread over the slots, the `redis+cluster://` URL, the per-node server check.
//! Damaged records are made with raw `HSET`/`HDEL` through a cluster connection; each case
//! deletes the keys it created.

use std::collections::HashSet;
use std::num::NonZeroU32;
use std::time::Duration;

use idemgate_core::durability::DurabilityLevel;
use idemgate_core::gauges::GaugedStore;
use idemgate_core::testing::{existing, fp, inserted, request, response, unique_key};
use idemgate_core::{IdempotencyStore, LeaseToken, RecordState};
use idemgate_redis::{RedisStore, ServerWarning};
use redis::cluster_async::ClusterConnection;
use redis::AsyncCommands;

mod common;

async fn make() -> Option<common::TestStore> {
    common::fresh_cluster_store().await
}

idemgate_core::store_conformance!(
    make,
    common::damage,
    idemgate_core::testing::StoreCapabilities {
        native_expiry: true
    }
);
idemgate_core::admin_conformance!(
    make,
    common::damage,
    idemgate_core::testing::StoreCapabilities {
        native_expiry: true
    }
);

const LONG: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(86_400);

async fn raw(nodes: &[String]) -> ClusterConnection {
    redis::cluster::ClusterClient::new(nodes.to_vec())
        .unwrap()
        .get_async_connection()
        .await
        .expect("connect to the test cluster")
}

async fn slot(raw: &mut ClusterConnection, key: &str) -> u16 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(raw)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_spread_over_slots_by_their_hash_tag() {
    let Some(store) = make().await else {
        return;
    };
    let mut raw = raw(&common::cluster_urls().unwrap()).await;
    let mut slots = HashSet::new();
    for _ in 0..24 {
        let k = unique_key("alice");
        let lease = inserted(
            store
                .insert_or_get(&request(&k, fp(1), LONG, DAY))
                .await
                .unwrap(),
        );
        store.complete(&lease, &response(32)).await.unwrap();
        let key = store.record_key(&k);
        let tag = &key[key.find('{').unwrap() + 1..key.len() - 1];
        let s = slot(&mut raw, &key).await;
        assert_eq!(s, slot(&mut raw, tag).await, "the slot is the hash tag's");
        let exists: bool = raw.exists(&key).await.unwrap();
        assert!(exists);
        slots.insert(s / 5462); // which third of the slot range: one per primary here
    }
    assert!(
        slots.len() >= 2,
        "records land on several primaries: {slots:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_record_runs_again_on_a_cluster() {
    let Some(store) = make().await else {
        return;
    };
    let mut raw = raw(&common::cluster_urls().unwrap()).await;
    let k = unique_key("alice");
    let lease = inserted(
        store
            .insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    store.complete(&lease, &response(8)).await.unwrap();
    let deleted: i64 = raw.del(store.record_key(&k)).await.unwrap();
    assert_eq!(deleted, 1);
    // a lost record is new (Inserted with fence 1), not taken over
    let again = inserted(
        store
            .insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    assert_eq!(again.fence, 1);
}

/// Take-over on a cluster: the compare-and-set runs on the record's slot, and a stale
/// snapshot is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn take_over_is_a_compare_and_set_on_a_cluster() {
    let Some(store) = make().await else {
        return;
    };
    let k = unique_key("alice");
    let short = Duration::from_millis(100);
    let old = inserted(
        store
            .insert_or_get(&request(&k, fp(1), short, DAY))
            .await
            .unwrap(),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (seen, now) = existing(
        store
            .insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    assert!(now >= seen.lease_expires_at.unwrap());
    assert_eq!(seen.state, RecordState::InProgress, "returned untouched");
    let new = store
        .take_over(&seen, LeaseToken::random(), LONG)
        .await
        .unwrap()
        .expect("taken over");
    assert_eq!(new.fence, old.fence + 1);
    assert!(store
        .take_over(&seen, LeaseToken::random(), LONG)
        .await
        .unwrap()
        .is_none());
    store.complete(&new, &response(4)).await.unwrap();
    assert_eq!(
        store.get(&k).await.unwrap().unwrap().response,
        Some(response(4))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_is_native_on_a_cluster() {
    let Some(store) = make().await else {
        return;
    };
    let ttl = Duration::from_millis(200);
    let mut expired = Vec::new();
    for _ in 0..5 {
        let k = unique_key("alice");
        // a lease shorter than the TTL: a record never expires under a live lease
        let lease = Duration::from_millis(100);
        store
            .insert_or_get(&request(&k, fp(1), lease, ttl))
            .await
            .unwrap();
        expired.push(k);
    }
    tokio::time::sleep(ttl + Duration::from_millis(150)).await;
    for k in &expired {
        assert!(store.get(k).await.unwrap().is_none());
    }
    let purged = store.purge_expired(NonZeroU32::new(3).unwrap()).await;
    assert_eq!(purged.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_url_connects_and_the_check_covers_every_primary() {
    let Some(nodes) = common::cluster_urls() else {
        return;
    };
    let hosts: Vec<&str> = nodes
        .iter()
        .map(|n| n.split_once("://").map_or(n.as_str(), |(_, h)| h))
        .collect();
    let url = format!("redis+cluster://{}", hosts.join(","));
    let store = RedisStore::connect(&url)
        .await
        .unwrap()
        .with_key_prefix(&common::prefix())
        .unwrap();
    let store = common::TestStore::new(store, common::Cleanup::Cluster(nodes.clone()));
    assert!(store.is_cluster());
    store.ping().await.unwrap();
    let k = unique_key("alice");
    store
        .insert_or_get(&request(&k, fp(1), LONG, DAY))
        .await
        .unwrap();
    assert!(store.get(&k).await.unwrap().is_some());

    let warnings = store.check_server().await.unwrap();
    for w in &warnings {
        println!("warning: {w}");
    }
    // start-cluster.sh runs its nodes with --appendonly no: one warning per primary
    let nodes_warned: HashSet<_> = warnings
        .iter()
        .filter_map(|w| match w {
            ServerWarning::NoAppendOnlyFile { node, .. } => node.clone(),
            _ => None,
        })
        .collect();
    assert!(nodes_warned.len() >= 3, "{warnings:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durability_reads_every_primary() {
    let Some(store) = make().await else {
        return;
    };
    // the RedisStore's own report (the test wrapper's `GaugedStore` keeps the default)
    let d = GaugedStore::durability(&*store).await.unwrap();
    println!("{d:#?}");
    // start-cluster.sh runs its nodes with --appendonly no
    assert_eq!(d.level, DurabilityLevel::Volatile);
    let primaries: HashSet<&str> = d
        .facts
        .iter()
        .filter_map(|(name, value)| name.strip_suffix(" appendonly").filter(|_| value == "no"))
        .collect();
    assert!(primaries.len() >= 3, "{:?}", d.facts);
    assert!(d.facts.contains(&("wait_replicas".into(), "0".into())));
}
