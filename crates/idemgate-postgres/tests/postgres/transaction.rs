//! `complete_using` inside the caller's transaction.

use std::time::Duration;

use idemgate_core::testing::{existing, fp, inserted, request, response, unique_key};
use idemgate_core::{
    response_checksum, IdempotencyStore, LeaseToken, RecordState, ScopedKey, StoreError,
};
use idemgate_postgres::PostgresStore;

use crate::{common, DAY, LONG};

async fn business_rows(store: &PostgresStore, table: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM \"{table}\""))
        .fetch_one(store.pool())
        .await
        .unwrap()
}

/// The stored `(response_checksum, response_checksum_fence)` of `key`.
async fn checksum_columns(store: &PostgresStore, k: &ScopedKey) -> (Option<Vec<u8>>, Option<i64>) {
    sqlx::query_as(&format!(
        "SELECT response_checksum, response_checksum_fence FROM \"{}\" \
         WHERE user_id = $1 AND route = $2 AND key = $3",
        store.table_name()
    ))
    .bind(&k.principal)
    .bind(&k.route)
    .bind(k.key.as_str())
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
    let lease = inserted(
        store
            .insert_or_get(&request(&k, fp(1), lease_ttl, DAY))
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
    // Retries find the request in flight (the engine answers 409) while the lease lasts ...
    let (rec, now) = existing(
        store
            .insert_or_get(&request(&k, fp(1), lease_ttl, DAY))
            .await
            .unwrap(),
    );
    assert_eq!(
        (rec.state, rec.lease_token),
        (RecordState::InProgress, Some(lease.token))
    );
    assert!(now < rec.lease_expires_at.unwrap(), "lease still live");
    // ... and, once it lapsed, one takes over; the first holder can no longer complete.
    tokio::time::sleep(lease_ttl + Duration::from_millis(150)).await;
    let (seen, now) = existing(
        store
            .insert_or_get(&request(&k, fp(1), lease_ttl, DAY))
            .await
            .unwrap(),
    );
    assert!(now >= seen.lease_expires_at.unwrap(), "lease lapsed");
    let second = store
        .take_over(&seen, LeaseToken::random(), lease_ttl)
        .await
        .unwrap()
        .expect("taken over");
    assert!(second.fence > lease.fence);
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
    let (rec, _) = existing(
        store
            .insert_or_get(&request(&k, fp(1), lease_ttl, DAY))
            .await
            .unwrap(),
    );
    assert_eq!(rec.state, RecordState::Completed);
    assert_eq!(rec.response, Some(response(100)), "replayed as stored");

    sqlx::raw_sql(&format!("DROP TABLE \"{payments}\""))
        .execute(store.pool())
        .await
        .unwrap();
}

/// `complete_using` writes the response checksum (sealed at the lease's fence), so a body
/// damaged after the commit is refused; and it lands after the lease lapsed when nobody
/// took over, like `complete`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_using_seals_the_response() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let k = unique_key("alice");
    let short = Duration::from_millis(200);
    let lease = inserted(
        store
            .insert_or_get(&request(&k, fp(1), short, DAY))
            .await
            .unwrap(),
    );
    tokio::time::sleep(short + Duration::from_millis(150)).await;
    let mut tx = store.pool().begin().await.unwrap();
    store
        .complete_using(&mut tx, &lease, &response(32))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let (sum, fence) = checksum_columns(&store, &k).await;
    assert_eq!(
        sum.as_deref(),
        Some(&response_checksum(&k, &response(32))[..])
    );
    assert_eq!(fence, Some(lease.fence));
    assert_eq!(
        store.get(&k).await.unwrap().unwrap().response,
        Some(response(32))
    );

    sqlx::query(&format!(
        "UPDATE \"{}\" SET response = substring(response from 2) \
         WHERE user_id = $1 AND route = $2 AND key = $3",
        store.table_name()
    ))
    .bind(&k.principal)
    .bind(&k.route)
    .bind(k.key.as_str())
    .execute(store.pool())
    .await
    .unwrap();
    let err = store.get(&k).await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    let err = store
        .insert_or_get(&request(&k, fp(1), LONG, DAY))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
}

/// While a caller's transaction holds the row (completed but not committed), a retry is
/// answered at once from the committed record (in flight), never blocked by the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_does_not_wait_for_an_open_transaction() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let k = unique_key("alice");
    let lease = inserted(
        store
            .insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    let mut tx = store.pool().begin().await.unwrap();
    store
        .complete_using(&mut tx, &lease, &response(3))
        .await
        .unwrap();
    let began = tokio::time::Instant::now();
    let req = request(&k, fp(1), LONG, DAY);
    let retry = store.insert_or_get(&req);
    let (rec, now) = existing(
        tokio::time::timeout(Duration::from_secs(1), retry)
            .await
            .unwrap()
            .unwrap(),
    );
    assert!(began.elapsed() < Duration::from_secs(1));
    assert_eq!(
        (rec.state, rec.lease_token),
        (RecordState::InProgress, Some(lease.token))
    );
    assert!(now < rec.lease_expires_at.unwrap());
    tx.commit().await.unwrap();
    let (rec, _) = existing(
        store
            .insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    assert_eq!(rec.response, Some(response(3)));
}
