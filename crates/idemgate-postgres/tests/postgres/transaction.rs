//! `complete_using` inside the caller's transaction.

use std::time::Duration;

use idemgate_core::testing::{fp, request, response, unique_key};
use idemgate_core::{decide, Decision, DecisionPolicy, IdempotencyStore, RecordState, StoreError};
use idemgate_postgres::PostgresStore;

use crate::{acquired, common, existing, DAY};

async fn business_rows(store: &PostgresStore, table: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM \"{table}\""))
        .fetch_one(store.pool())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_leaves_in_progress_and_commit_completes() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let payments = format!("{}_payments", store.table_name());
    sqlx::raw_sql(&format!(
        "CREATE TABLE \"{payments}\" (amount BIGINT NOT NULL)"
    ))
    .execute(store.pool())
    .await
    .unwrap();
    let lease_ttl = Duration::from_millis(400);
    let k = unique_key("alice");
    let (lease, _) = acquired(
        store
            .acquire(&request(&k, fp(1), lease_ttl, DAY))
            .await
            .unwrap(),
    );

    // The business row and the completion roll back together.
    let mut tx = store.pool().begin().await.unwrap();
    sqlx::query(&format!("INSERT INTO \"{payments}\" (amount) VALUES (10)"))
        .execute(&mut *tx)
        .await
        .unwrap();
    store
        .complete_using(&mut tx, &lease, &response(100))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(business_rows(&store, &payments).await, 0);
    let rec = store.get(&k).await.unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.fence, rec.response),
        (RecordState::InProgress, lease.fence, None)
    );
    // Retries are told the request is in flight (409) while the lease lasts ...
    let (rec, now) = existing(
        store
            .acquire(&request(&k, fp(1), lease_ttl, DAY))
            .await
            .unwrap(),
    );
    let policy = DecisionPolicy::default();
    assert!(matches!(
        decide(Some(&rec), &fp(1), now, &policy),
        Decision::InFlight { .. }
    ));
    // ... and take over once it lapsed; the first holder can no longer complete.
    tokio::time::sleep(lease_ttl + Duration::from_millis(150)).await;
    let (second, takeover) = acquired(
        store
            .acquire(&request(&k, fp(1), lease_ttl, DAY))
            .await
            .unwrap(),
    );
    assert!(takeover && second.fence > lease.fence);
    let mut tx = store.pool().begin().await.unwrap();
    let stale = store.complete_using(&mut tx, &lease, &response(1)).await;
    assert!(matches!(stale, Err(StoreError::LeaseLost)), "{stale:?}");
    tx.rollback().await.unwrap();

    // Committed: both the business row and the completed record are there.
    let mut tx = store.pool().begin().await.unwrap();
    sqlx::query(&format!("INSERT INTO \"{payments}\" (amount) VALUES (10)"))
        .execute(&mut *tx)
        .await
        .unwrap();
    store
        .complete_using(&mut tx, &second, &response(100))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(business_rows(&store, &payments).await, 1);
    let (rec, now) = existing(
        store
            .acquire(&request(&k, fp(1), lease_ttl, DAY))
            .await
            .unwrap(),
    );
    assert_eq!(rec.state, RecordState::Completed);
    assert_eq!(rec.response, Some(response(100)));
    assert_eq!(decide(Some(&rec), &fp(1), now, &policy), Decision::Replay);

    sqlx::raw_sql(&format!("DROP TABLE \"{payments}\""))
        .execute(store.pool())
        .await
        .unwrap();
    common::drop_table(&store).await;
}
