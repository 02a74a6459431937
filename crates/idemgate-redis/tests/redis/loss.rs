//! Record loss: what a retry does when Redis lost the record (eviction, failover, restart
//! without persistence). Documented behaviour: the key is new again, and the retry runs.

use idemgate_core::testing::{existing, fp, inserted, request, response, unique_key};
use idemgate_core::{IdempotencyStore, RecordState};
use redis::AsyncCommands;

use crate::{common, DAY, LONG};

#[tokio::test]
async fn a_lost_record_runs_again() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let mut raw = common::raw(&common::url().unwrap()).await;
    let k = unique_key("alice");
    let lease = inserted(
        store
            .insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    store.complete(&lease, &response(16)).await.unwrap();
    let (rec, _) = existing(
        store
            .insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    assert_eq!(rec.state, RecordState::Completed);

    // lost behind the store's back, as eviction or a failover would lose it
    let deleted: i64 = raw.del(store.record_key(&k)).await.unwrap();
    assert_eq!(deleted, 1);

    assert!(store.get(&k).await.unwrap().is_none());
    // a lost record is new (Inserted), not taken over
    let again = inserted(
        store
            .insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    assert_eq!(again.fence, 1, "fences restart with the record");
    // the holder of the lost record can no longer write: its token is gone
    assert!(store.complete(&lease, &response(1)).await.is_err());
    store.complete(&again, &response(2)).await.unwrap();
}

#[tokio::test]
async fn a_record_lost_while_in_flight_refuses_the_old_holder() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let mut raw = common::raw(&common::url().unwrap()).await;
    let k = unique_key("alice");
    let lease = inserted(
        store
            .insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    let _: i64 = raw.del(store.record_key(&k)).await.unwrap();
    // the first holder's outcome cannot resurrect the record: nothing to compare against
    assert!(matches!(
        store.complete(&lease, &response(1)).await,
        Err(idemgate_core::StoreError::LeaseLost)
    ));
    assert!(store.get(&k).await.unwrap().is_none());
}
