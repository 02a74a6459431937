//! A stalled synchronous standby: a fresh key is never reported inserted, replays are still
//! answered (from the connections kept for reads, even with every write connection stuck),
//! and once the standby is back the unconfirmed records can be released by their tokens.

use std::time::Duration;

use idemgate_core::gauges::GaugedStore;
use idemgate_core::testing::{existing, fp, inserted, request, response, unique_key};
use idemgate_core::{IdempotencyStore, InsertOutcome, InsertRequest, Lease, StoreError};
use idemgate_postgres::PostgresStore;
use tokio::time::Instant;

use crate::cluster::{sync_options, Cluster, Mode};

const LONG: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(86_400);
/// The store deadline (statement timeout) of these tests.
const DEADLINE: Duration = Duration::from_secs(2);
/// What a replay may take while the standby is stalled.
const PROMPT: Duration = Duration::from_millis(500);

/// A fresh insert that must not be reported inserted; returns its error.
async fn not_inserted(store: &PostgresStore, req: &InsertRequest) -> StoreError {
    let began = Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(10), store.insert_or_get(req))
        .await
        .expect("the insert is answered by its deadline");
    assert!(
        began.elapsed() < Duration::from_secs(6),
        "took {:?}",
        began.elapsed()
    );
    match out {
        Ok(InsertOutcome::Inserted(lease)) => panic!("reported inserted: {lease:?}"),
        Ok(InsertOutcome::Existing { record, .. }) => panic!("a fresh key exists: {record:?}"),
        Err(e) => e,
    }
}

/// Replays `req`'s key, which must come back promptly as the existing record.
async fn replay(store: &PostgresStore, req: &InsertRequest) {
    let began = Instant::now();
    let out = tokio::time::timeout(PROMPT * 4, store.insert_or_get(req))
        .await
        .expect("a replay is answered");
    existing(out.expect("a replay is answered"));
    assert!(
        began.elapsed() < PROMPT,
        "a replay took {:?}",
        began.elapsed()
    );
}

/// The lease a fresh insert of `req` would have been given (fence 1).
fn lease_of(req: &InsertRequest) -> Lease {
    Lease {
        key: req.key.clone(),
        fence: 1,
        token: req.token,
        expires_at: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_standby_refuses_fresh_keys_and_serves_replays() {
    let cluster = Cluster::start(Mode::Sync).synchronous().await;
    let store = cluster.store(&sync_options(4, DEADLINE)).await;
    let done = request(&unique_key("alice"), fp(1), LONG, DAY);
    let lease = inserted(store.insert_or_get(&done).await.unwrap());
    store.complete(&lease, &response(64)).await.unwrap();
    assert_eq!(store.durability().await.unwrap().refusing_new_keys, None);

    cluster.stall();
    // Eight fresh keys at once on a pool of 4 (3 write permits): the first three stall in
    // their commits, the others wait for a permit until the store sees the stall and
    // refuses them; replays go on meanwhile, on the connection kept for reads.
    let fresh: Vec<InsertRequest> = (0..8)
        .map(|_| request(&unique_key("bob"), fp(2), LONG, DAY))
        .collect();
    let inserts: Vec<_> = fresh
        .iter()
        .cloned()
        .map(|req| {
            let store = store.clone();
            tokio::spawn(async move { not_inserted(&store, &req).await })
        })
        .collect();
    let began = Instant::now();
    while began.elapsed() < DEADLINE + Duration::from_millis(500) {
        replay(&store, &done).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for insert in inserts {
        let err = insert.await.unwrap();
        assert!(
            matches!(err, StoreError::Unavailable(_) | StoreError::Refused(_)),
            "{err:?}"
        );
    }
    // By now the store has seen the stall: fresh keys are refused at once, definitely.
    let one_more = request(&unique_key("carol"), fp(3), LONG, DAY);
    let err = not_inserted(&store, &one_more).await;
    assert!(matches!(err, StoreError::Refused(_)), "{err:?}");
    assert!(!err.outcome_unknown());
    let d = store.durability().await.unwrap();
    assert!(d.refusing_new_keys.is_some(), "{d:?}");
    replay(&store, &done).await;

    cluster.resume();
    let began = Instant::now();
    while store
        .durability()
        .await
        .unwrap()
        .refusing_new_keys
        .is_some()
    {
        assert!(
            began.elapsed() < Duration::from_secs(15),
            "still refusing after resume"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Every unconfirmed record can be released by its token; the store itself released
    // those whose commits ended after their answer (the release then finds nothing).
    for req in fresh.iter().chain([&one_more]) {
        match store.release(&lease_of(req)).await {
            Ok(()) | Err(StoreError::LeaseLost) => {}
            Err(e) => panic!("release: {e:?}"),
        }
        assert!(store.get(&req.key).await.unwrap().is_none());
    }
    inserted(store.insert_or_get(&one_more).await.unwrap());
}
