//! The core's lifecycle over a store that waits for a replica: what a client sees when the
//! replica stops acknowledging.

use std::sync::Arc;
use std::time::Duration;

use idemgate_core::testing::{fp, response, unique_key};
use idemgate_core::{
    Answer, Begin, Finished, IdempotencyStore, Lifecycle, Outcome, RoutePlan, ScopedKey,
};
use idemgate_redis::{RedisOptions, RedisStore};

use crate::replica_set::ReplicaSet;
use crate::WAIT;

async fn begin(lifecycle: &Lifecycle<RedisStore>, k: &ScopedKey) -> Begin {
    let plan = RoutePlan::default();
    lifecycle.begin(k, fp(1), &plan, |_| async { None }).await
}

/// Polls `k` until the store no longer holds a record (the follow-up released it).
async fn released(store: &RedisStore, k: &ScopedKey) {
    for _ in 0..50 {
        if store.get(k).await.unwrap().is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the unconfirmed record was not released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconfirmed_key_is_not_run_and_an_outcome_lands_once_acknowledged() {
    let Some(set) = ReplicaSet::start() else {
        return;
    };
    let opts = RedisOptions::default().with_wait(1, WAIT);
    let store = ReplicaSet::store(&set.primary_url(), &opts).await;
    let lifecycle = Lifecycle::new(Arc::new(store.clone()), Default::default());

    set.stall();
    let k = unique_key("alice");
    match begin(&lifecycle, &k).await {
        Begin::Answer(Answer::Unavailable(_)) => {}
        other => panic!("an unconfirmed insert must not run: {other:?}"),
    }
    // the lifecycle's follow-up releases the record its insert left, by its token
    released(&store, &k).await;

    // an outcome written while the replica is stalled lands once it acknowledges
    set.resume();
    let k = unique_key("bob");
    let Begin::Run(holder) = begin(&lifecycle, &k).await else {
        panic!("a confirmed insert runs");
    };
    set.stall();
    let finishing = {
        let lifecycle = lifecycle.clone();
        tokio::spawn(async move {
            let done = lifecycle
                .finish(&holder, Outcome::Complete(response(8)))
                .await;
            done
        })
    };
    tokio::time::sleep(WAIT * 3).await;
    assert!(
        !finishing.is_finished(),
        "landed without an acknowledgement"
    );
    set.resume();
    assert_eq!(finishing.await.unwrap(), Finished::Landed);
    match begin(&lifecycle, &k).await {
        Begin::Answer(Answer::Replay(r)) => assert_eq!(r, response(8)),
        other => panic!("expected the replay, got {other:?}"),
    }
}
