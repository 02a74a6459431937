//! Test helpers: the gated server URLs, per-store key prefixes, and [`TestStore`], which
//! deletes the keys its test created and damages records for the conformance suite.
#![allow(dead_code, unused_imports, unreachable_pub)] // each test binary uses a different subset

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use idemgate_redis::RedisStore;

mod store;

pub(crate) use store::{damage, Cleanup, TestStore};

/// The environment variable holding the single-node test server URL.
pub(crate) const URL_VAR: &str = "IDEMGATE_TEST_REDIS_URL";
/// The environment variable holding the cluster's node URLs, comma-separated.
pub(crate) const CLUSTER_VAR: &str = "IDEMGATE_TEST_REDIS_CLUSTER_URLS";

/// Test keys older than this are deleted by later runs (a run never lasts this long).
const STALE_AFTER_SECS: u64 = 3600;

fn env(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => Some(v.trim().to_owned()),
        _ => {
            println!("skipping: {var} is not set");
            None
        }
    }
}

/// The single-node test URL, or `None` after printing why the test is skipped.
pub(crate) fn url() -> Option<String> {
    env(URL_VAR)
}

/// The cluster node URLs, or `None` after printing why the test is skipped.
pub(crate) fn cluster_urls() -> Option<Vec<String>> {
    Some(
        env(CLUSTER_VAR)?
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect(),
    )
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A key prefix of its own: `idemgate-test:<unix secs>:<random hex>:`.
pub(crate) fn prefix() -> String {
    format!(
        "idemgate-test:{}:{:016x}:",
        unix_secs(),
        rand::random::<u64>()
    )
}

/// A store on the single-node test server with a prefix of its own, deleting the keys it
/// created when dropped; `None` when the URL is not set.
pub(crate) async fn fresh_store() -> Option<TestStore> {
    let url = url()?;
    let store = RedisStore::connect(&url)
        .await
        .expect("connect to the test Redis")
        .with_key_prefix(&prefix())
        .unwrap();
    sweep_stale_keys(&url).await;
    Some(TestStore::new(store, Cleanup::Single(url)))
}

/// A store on the test cluster with a prefix of its own, deleting the keys it created when
/// dropped; `None` when the URLs are not set.
pub(crate) async fn fresh_cluster_store() -> Option<TestStore> {
    let nodes = cluster_urls()?;
    let store = RedisStore::connect_cluster(&nodes, &Default::default())
        .await
        .expect("connect to the test cluster")
        .with_key_prefix(&prefix())
        .unwrap();
    Some(TestStore::new(store, Cleanup::Cluster(nodes)))
}

/// A plain connection to the single-node test server, for looking behind the store's back.
pub(crate) async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("connect to the test Redis")
}

/// Best effort, once per process: deletes `idemgate-test:<secs>:*` keys that earlier runs
/// left behind more than an hour ago (a run killed before its stores were dropped; most
/// records carry a 24 h TTL). Never touches other keys.
async fn sweep_stale_keys(url: &str) {
    static SWEPT: AtomicBool = AtomicBool::new(false);
    if SWEPT.swap(true, Ordering::SeqCst) {
        return;
    }
    let mut conn = raw(url).await;
    let cutoff = unix_secs().saturating_sub(STALE_AFTER_SECS);
    let mut cursor: u64 = 0;
    loop {
        let Ok((next, keys)): redis::RedisResult<(u64, Vec<String>)> = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("idemgate-test:*")
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
        else {
            return;
        };
        let stale: Vec<&String> = keys
            .iter()
            .filter(|k| {
                k.strip_prefix("idemgate-test:")
                    .and_then(|rest| rest.split(':').next())
                    .and_then(|secs| secs.parse::<u64>().ok())
                    .is_some_and(|secs| secs < cutoff)
            })
            .collect();
        if !stale.is_empty() {
            let _: redis::RedisResult<i64> = redis::cmd("UNLINK")
                .arg(&stale)
                .query_async(&mut conn)
                .await;
        }
        if next == 0 {
            return;
        }
        cursor = next;
    }
}
