//! A `redis+sentinel://` store through a `kill -9` of its primary.

use std::time::Duration;

use idemgate_core::gauges::GaugedStore;
use idemgate_core::testing::{fp, inserted, request, response, unique_key};
use idemgate_core::{IdempotencyStore, RecordState, ScopedKey, StoreError, StoredResponse};
use idemgate_redis::{RedisOptions, RedisStore};
use tokio::time::Instant;

use crate::replica_set::ReplicaSet;
use crate::{DAY, LONG};

/// Records written before the failover.
const RECORDS: usize = 50;
/// Sentinel's down-after is 1 s and a failover takes a few more: far more than enough.
const FAILOVER_BOUND: Duration = Duration::from_secs(30);

/// A response telling record `i` from the others.
fn response_of(i: usize) -> StoredResponse {
    let mut r = response(16 + i);
    r.status = 200 + (i % 7) as u16;
    r
}

async fn write_acknowledged(store: &RedisStore) -> Vec<(ScopedKey, StoredResponse)> {
    let mut written = Vec::new();
    for i in 0..RECORDS {
        let k = unique_key("alice");
        let lease = inserted(
            store
                .insert_or_get(&request(&k, fp(1), LONG, DAY))
                .await
                .unwrap(),
        );
        store.complete(&lease, &response_of(i)).await.unwrap();
        written.push((k, response_of(i)));
    }
    written
}

/// Reads `k` until the store answers (the new primary), counting the failed calls.
async fn read_through_failover(store: &RedisStore, k: &ScopedKey) -> usize {
    let started = Instant::now();
    let mut failed = 0;
    loop {
        match store.get(k).await {
            Ok(Some(_)) => return failed,
            Ok(None) => panic!("an acknowledged record is gone after the failover"),
            Err(e) => {
                assert!(
                    matches!(e, StoreError::Unavailable(_) | StoreError::Timeout),
                    "{e:?}"
                );
                failed += 1;
            }
        }
        assert!(started.elapsed() < FAILOVER_BOUND, "no new primary");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_follows_a_failover_and_loses_no_acknowledged_record() {
    let Some(set) = ReplicaSet::start() else {
        return;
    };
    let opts = RedisOptions::default().with_wait(1, Duration::from_secs(1));
    let store = ReplicaSet::store(&set.sentinel_url(), &opts).await;
    let written = write_acknowledged(&store).await;

    set.kill_primary();
    let failed = read_through_failover(&store, &written[0].0).await;
    println!("calls failed during the failover: {failed}");
    assert!(
        failed > 0,
        "the primary was killed: some call must have failed"
    );

    // on the promoted replica: every acknowledged record, with its response
    for (k, resp) in &written {
        let rec = store.get(k).await.unwrap().expect("acknowledged record");
        assert_eq!(rec.state, RecordState::Completed);
        assert_eq!(rec.response.as_ref(), Some(resp));
    }
    // the new primary has no replica left: a fresh key is refused, never run unconfirmed
    let fresh = store
        .insert_or_get(&request(&unique_key("bob"), fp(1), LONG, DAY))
        .await;
    assert!(
        matches!(fresh, Err(StoreError::Unavailable(_))),
        "{fresh:?}"
    );
    let d = store.durability().await.unwrap();
    assert!(d.refusing_new_keys.is_some(), "{d:?}");

    // a store that waits for no replica writes on the new primary
    let plain = ReplicaSet::store(&set.sentinel_url(), &RedisOptions::default()).await;
    let k = unique_key("carol");
    let lease = inserted(
        plain
            .insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    plain.complete(&lease, &response(4)).await.unwrap();
}
