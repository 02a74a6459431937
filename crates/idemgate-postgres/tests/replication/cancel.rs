//! A commit whose wait for the standby is cancelled (`pg_cancel_backend`) succeeds with only
//! a warning the driver does not surface: the store must still not report the write while
//! the standby lacks it.

use std::time::Duration;

use idemgate_core::testing::{fp, inserted, request, response, unique_key};
use idemgate_core::{IdempotencyStore, InsertOutcome, Lease, RecordState, StoreError};
use tokio::time::Instant;

use crate::cluster::{sync_options, Cluster, Mode};

const LONG: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(86_400);
/// The store deadline: long enough to cancel the wait well before it.
const DEADLINE: Duration = Duration::from_secs(2);

/// Cancels the first backend found waiting on the standby.
async fn cancel_the_wait(cluster: &Cluster) {
    let pid = cluster.sync_waiter().await;
    let mut conn = cluster.admin().await;
    let cancelled: bool = sqlx::query_scalar("SELECT pg_cancel_backend($1)")
        .bind(pid)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert!(cancelled);
}

/// An outcome write that must not be reported done while the standby is stalled.
fn unconfirmed(out: Result<(), StoreError>, began: Instant) {
    let err = out.expect_err("reported done while the standby lacks it");
    assert!(err.outcome_unknown(), "{err:?}");
    assert!(began.elapsed() < DEADLINE * 2, "took {:?}", began.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelled_waits_are_not_reported_as_writes() {
    let cluster = Cluster::start(Mode::Sync).synchronous().await;
    let store = cluster.store(&sync_options(8, DEADLINE)).await;
    let held = inserted(
        store
            .insert_or_get(&request(&unique_key("alice"), fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    cluster.stall();

    // A fresh insert whose commit is released by a cancel: not reported inserted.
    let fresh = request(&unique_key("bob"), fp(2), LONG, DAY);
    let insert = {
        let (store, fresh) = (store.clone(), fresh.clone());
        tokio::spawn(async move { store.insert_or_get(&fresh).await })
    };
    cancel_the_wait(&cluster).await;
    match insert.await.unwrap() {
        Ok(InsertOutcome::Inserted(lease)) => panic!("reported inserted: {lease:?}"),
        Ok(InsertOutcome::Existing { record, .. }) => panic!("a fresh key exists: {record:?}"),
        Err(e) => assert!(e.outcome_unknown(), "{e:?}"),
    }

    // complete, likewise; and again, as the lifecycle retries it: the row is already
    // completed (its compare-and-set changes nothing), but the standby still lacks it.
    let answer = response(32);
    let complete = {
        let (store, held, answer) = (store.clone(), held.clone(), answer.clone());
        tokio::spawn(async move {
            let began = Instant::now();
            (store.complete(&held, &answer).await, began)
        })
    };
    cancel_the_wait(&cluster).await;
    let (out, began) = complete.await.unwrap();
    unconfirmed(out, began);
    let began = Instant::now();
    unconfirmed(store.complete(&held, &answer).await, began);

    cluster.resume();
    store.complete(&held, &answer).await.unwrap();
    let record = store.get(&held.key).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Completed);
    // The unconfirmed insert's record is released by its token once the standby has it.
    let orphan = Lease {
        key: fresh.key.clone(),
        fence: 1,
        token: fresh.token,
        expires_at: 0,
    };
    store.release(&orphan).await.unwrap();
    assert!(store.get(&fresh.key).await.unwrap().is_none());
}
