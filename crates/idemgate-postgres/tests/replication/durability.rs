//! The durability report of an async cluster, a sync cluster and the local test server.

use idemgate_core::gauges::GaugedStore;
use idemgate_core::{Durability, DurabilityLevel};
use idemgate_postgres::{PostgresOptions, PostgresStore};

use crate::cluster::{Cluster, Mode};
use crate::common;

/// The value of fact `name`.
fn fact<'d>(d: &'d Durability, name: &str) -> &'d str {
    d.facts
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no fact {name:?} in {:?}", d.facts))
}

/// The cluster runs with `fsync = off` (for speed): turns it on, as a real server has it.
async fn fsync_on(cluster: &Cluster) {
    cluster.exec("ALTER SYSTEM SET fsync = on").await;
    cluster.exec("SELECT pg_reload_conf()").await;
    // The reload reaches the store's sessions before their next statement; wait for it.
    let mut conn = cluster.admin().await;
    for _ in 0..100 {
        let fsync: String = sqlx::query_scalar("SHOW fsync")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        if fsync == "on" {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("fsync stayed off");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_cluster_is_local_with_its_standby_listed() {
    let cluster = Cluster::start(Mode::Async);
    let store = PostgresStore::connect(&cluster.url()).await.unwrap();
    let volatile = store.durability().await.unwrap();
    assert_eq!(volatile.level, DurabilityLevel::Volatile, "{volatile:?}");
    assert!(volatile.summary.contains("fsync is off"), "{volatile:?}");
    fsync_on(&cluster).await;
    let d = store.durability().await.unwrap();
    assert_eq!(d.level, DurabilityLevel::Local, "{d:?}");
    assert!(d.summary.contains("before any standby has them"), "{d:?}");
    assert!(
        fact(&d, "standby standby").contains("sync_state=async"),
        "{d:?}"
    );
    assert_eq!(fact(&d, "synchronous_standby_names"), "");
    assert_eq!(fact(&d, "timeline"), "00000001");
    assert!(
        fact(&d, "system identifier").parse::<u64>().is_ok(),
        "{d:?}"
    );
    assert_eq!(d.refusing_new_keys, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_cluster_is_replicated() {
    let cluster = Cluster::start(Mode::Sync).synchronous().await;
    fsync_on(&cluster).await;
    let options = PostgresOptions::new().with_require_synchronous_replication(true);
    let store = PostgresStore::connect_with(&cluster.url(), &options)
        .await
        .unwrap();
    let d = store.durability().await.unwrap();
    assert_eq!(d.level, DurabilityLevel::Replicated, "{d:?}");
    assert_eq!(d.summary, "commits wait for 1 synchronous standby (on)");
    assert_eq!(fact(&d, "synchronous_standby_names"), "FIRST 1 (standby)");
    assert_eq!(fact(&d, "synchronous standbys required"), "1");
    let standby = fact(&d, "standby standby");
    assert!(
        standby.contains("state=streaming, sync_state=sync, flush_lsn=0/"),
        "{standby}"
    );
    assert_eq!(d.refusing_new_keys, None, "{d:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_test_server_is_local_without_a_standby() {
    let Some(url) = common::url() else {
        return;
    };
    let store = PostgresStore::connect(&url).await.unwrap();
    let d = store.durability().await.unwrap();
    if fact(&d, "fsync") == "on" && fact(&d, "synchronous_commit") == "on" {
        assert_eq!(d.level, DurabilityLevel::Local, "{d:?}");
        assert!(d.summary.contains("no standby is connected"), "{d:?}");
    }
    assert_eq!(fact(&d, "standbys"), "none connected", "{d:?}");
    assert_eq!(fact(&d, "pg_is_in_recovery"), "false");
    assert_eq!(d.refusing_new_keys, None);
}
