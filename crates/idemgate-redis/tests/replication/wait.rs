//! `wait_replicas` against a replica that stops acknowledging (SIGSTOP).

use std::error::Error as _;
use std::time::Duration;

use idemgate_core::testing::{existing, fp, inserted, request, response, unique_key};
use idemgate_core::{
    IdempotencyStore, InsertOutcome, Lease, LeaseToken, RecordState, ScopedKey, StoreError,
};
use idemgate_redis::{RedisOptions, RedisStore, RedisStoreError};
use tokio::time::Instant;

use crate::replica_set::ReplicaSet;
use crate::{DAY, LONG, WAIT};

fn waiting() -> RedisOptions {
    RedisOptions::default().with_wait(1, WAIT)
}

/// Asserts `r` is the "not acknowledged" answer: unavailable (outcome unknown), saying why.
fn unconfirmed<T: std::fmt::Debug>(r: Result<T, StoreError>) {
    let err = r.expect_err("an unacknowledged write must not succeed");
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    let why = err.source().map(ToString::to_string).unwrap_or_default();
    assert!(why.contains("not acknowledged by 1 replicas"), "{why}");
}

async fn completed_keys(store: &RedisStore, n: usize) -> Vec<ScopedKey> {
    let mut keys = Vec::new();
    for _ in 0..n {
        let k = unique_key("alice");
        let lease = inserted(
            store
                .insert_or_get(&request(&k, fp(1), LONG, DAY))
                .await
                .unwrap(),
        );
        store.complete(&lease, &response(64)).await.unwrap();
        keys.push(k);
    }
    keys
}

/// A replay of `k`, timed: it must be answered well within the wait timeout.
async fn quick_replay(store: &RedisStore, k: &ScopedKey) -> Duration {
    let started = Instant::now();
    let (rec, _) = existing(
        store
            .insert_or_get(&request(k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    assert_eq!(rec.state, RecordState::Completed);
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_replica_refuses_fresh_keys_and_nothing_else() {
    let Some(set) = ReplicaSet::start() else {
        return;
    };
    let store = ReplicaSet::store(&set.primary_url(), &waiting()).await;
    let done = completed_keys(&store, 4).await;
    set.stall();

    let started = Instant::now();
    unconfirmed(
        store
            .insert_or_get(&request(&unique_key("bob"), fp(1), LONG, DAY))
            .await,
    );
    let took = started.elapsed();
    assert!(took >= WAIT - Duration::from_millis(50), "{took:?}");
    assert!(took < WAIT + Duration::from_millis(500), "{took:?}");
    assert!(quick_replay(&store, &done[0]).await < WAIT / 2);

    // a waited write in flight stalls nothing but itself
    let (s, k) = (store.clone(), unique_key("carol"));
    let in_flight =
        tokio::spawn(async move { s.insert_or_get(&request(&k, fp(1), LONG, DAY)).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    for k in &done {
        let took = quick_replay(&store, k).await;
        assert!(
            took < Duration::from_millis(100),
            "a replay waited {took:?}"
        );
        assert!(store.get(k).await.unwrap().is_some());
    }
    assert!(
        !in_flight.is_finished(),
        "the replays ran while the write waited"
    );
    unconfirmed(in_flight.await.unwrap());

    set.resume();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let k = unique_key("dave");
    let lease = inserted(
        store
            .insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    store.complete(&lease, &response(8)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_write_is_ok_only_once_acknowledged() {
    let Some(set) = ReplicaSet::start() else {
        return;
    };
    let store = ReplicaSet::store(&set.primary_url(), &waiting()).await;
    // the lifecycle's retry, on connections of another store: its WAIT must still cover
    // the first attempt, which ran on a connection it never saw
    let retrier = RedisStore::connect_with(&set.primary_url(), &waiting())
        .await
        .unwrap()
        .with_key_prefix(store.key_prefix())
        .unwrap();
    let k = unique_key("alice");
    let lease = inserted(
        store
            .insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    set.stall();
    unconfirmed(store.complete(&lease, &response(32)).await);
    unconfirmed(retrier.complete(&lease, &response(32)).await);
    // another token at the same fence is stale, stalled replica or not
    let forged = Lease {
        token: LeaseToken(lease.token.0.wrapping_add(1)),
        ..lease.clone()
    };
    assert!(matches!(
        retrier.complete(&forged, &response(32)).await,
        Err(StoreError::LeaseLost)
    ));

    set.resume();
    retrier.complete(&lease, &response(32)).await.unwrap();
    store.complete(&lease, &response(32)).await.unwrap();
    let rec = store.get(&k).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::Completed);
    assert_eq!(rec.response, Some(response(32)));
    assert!(matches!(
        retrier.complete(&forged, &response(32)).await,
        Err(StoreError::LeaseLost)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_and_release_retries_land_once_acknowledged() {
    let Some(set) = ReplicaSet::start() else {
        return;
    };
    let store = ReplicaSet::store(&set.primary_url(), &waiting()).await;
    let (failed, released) = (unique_key("alice"), unique_key("bob"));
    let mut leases = Vec::new();
    for k in [&failed, &released] {
        let outcome = store.insert_or_get(&request(k, fp(1), LONG, DAY)).await;
        leases.push(inserted(outcome.unwrap()));
    }
    set.stall();
    unconfirmed(store.fail(&leases[0]).await);
    unconfirmed(store.release(&leases[1]).await);
    // a release found done is done: nothing holds the key
    store.release(&leases[1]).await.unwrap();
    set.resume();
    store.fail(&leases[0]).await.unwrap();
    let rec = store.get(&failed).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::Failed);
    assert!(store.get(&released).await.unwrap().is_none());
    assert!(matches!(
        store
            .insert_or_get(&request(&released, fp(1), LONG, DAY))
            .await,
        Ok(InsertOutcome::Inserted(_))
    ));
}

#[tokio::test]
async fn a_cluster_refuses_waiting_for_replicas() {
    let opts = RedisOptions::default().with_wait(1, WAIT);
    let err = RedisStore::connect_with("redis+cluster://127.0.0.1:1,127.0.0.1:2", &opts)
        .await
        .unwrap_err();
    assert!(
        matches!(err, RedisStoreError::InvalidOptions { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("wait_replicas"), "{err}");
}
