//! The durability report, read from the servers.

use std::time::Duration;

use idemgate_core::durability::DurabilityLevel;
use idemgate_core::gauges::GaugedStore;
use idemgate_redis::RedisOptions;

use crate::common;
use crate::replica_set::ReplicaSet;
use crate::WAIT;

fn fact<'a>(facts: &'a [(String, String)], name: &str) -> Option<&'a str> {
    facts
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

#[tokio::test]
async fn the_local_server_without_persistence_is_volatile() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    // the RedisStore's own report (the test wrapper's `GaugedStore` keeps the default)
    let d = GaugedStore::durability(&*store).await.unwrap();
    println!("{d:#?}");
    // the test server runs `appendonly no`
    assert_eq!(fact(&d.facts, "appendonly"), Some("no"));
    assert_eq!(d.level, DurabilityLevel::Volatile);
    assert!(d.summary.contains("appendonly no"), "{}", d.summary);
    assert_eq!(fact(&d.facts, "wait_replicas"), Some("0"));
    assert_eq!(d.refusing_new_keys, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_connected_replica_is_replicated() {
    let Some(set) = ReplicaSet::start() else {
        return;
    };
    let opts = RedisOptions::default().with_wait(1, WAIT);
    for url in [set.primary_url(), set.sentinel_url()] {
        let store = ReplicaSet::store(&url, &opts).await;
        let d = store.durability().await.unwrap();
        println!("{d:#?}");
        assert_eq!(d.level, DurabilityLevel::Replicated, "{url}");
        assert!(d.summary.contains("WAIT"), "{}", d.summary);
        assert_eq!(fact(&d.facts, "connected_slaves"), Some("1"));
        assert_eq!(fact(&d.facts, "wait_replicas"), Some("1"));
    }
    let unwaited = ReplicaSet::store(&set.primary_url(), &RedisOptions::default()).await;
    assert_eq!(
        unwaited.durability().await.unwrap().level,
        DurabilityLevel::Volatile
    );

    // a replica that stopped acknowledging no longer counts
    let store = ReplicaSet::store(&set.primary_url(), &opts).await;
    set.stall();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let d = store.durability().await.unwrap();
    set.resume();
    assert_eq!(d.level, DurabilityLevel::Volatile, "{d:#?}");
    assert!(d.refusing_new_keys.is_some(), "{d:#?}");
}
