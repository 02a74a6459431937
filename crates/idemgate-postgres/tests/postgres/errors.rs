//! Errors are classified for the HTTP layer (503 vs. lease lost), with their source kept.

use std::error::Error as _;
use std::time::Duration;

use idemgate_core::testing::{fp, inserted, request, response, unique_key};
use idemgate_core::{IdempotencyStore, StoreError};
use idemgate_postgres::{PostgresStore, PostgresStoreError};

use crate::{common, DAY, LONG};

#[tokio::test]
async fn unreachable_server_is_unavailable() {
    // Nothing listens on port 1.
    let url = "postgres://postgres@127.0.0.1:1/test";
    let err = PostgresStore::connect(url).await.unwrap_err();
    let err = StoreError::from(err);
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    assert!(err.source().is_some());

    let pool = PostgresStore::pool_options()
        .acquire_timeout(Duration::from_millis(300))
        .connect_lazy(url)
        .unwrap();
    let store = PostgresStore::from_pool(pool);
    let err = store.ping().await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    let k = unique_key("alice");
    let err = store
        .insert_or_get(&request(&k, fp(1), LONG, DAY))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_timeout_is_timeout_and_serialization_failure_conflict() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    // A store whose connections carry a 200 ms statement timeout (set in the URL).
    let base = common::url().unwrap();
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-c%20statement_timeout%3D200ms");
    let slow = PostgresStore::connect(&url)
        .await
        .unwrap()
        .with_table_name(&store.table_name())
        .unwrap();
    let k = unique_key("alice");
    let lease = inserted(
        store
            .insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    // Hold the row locked, so the complete below waits past its statement timeout.
    let mut tx = store.pool().begin().await.unwrap();
    sqlx::query(&format!(
        "SELECT 1 FROM \"{}\" FOR UPDATE",
        store.table_name()
    ))
    .execute(&mut *tx)
    .await
    .unwrap();
    let err = slow.complete(&lease, &response(1)).await.unwrap_err();
    assert!(matches!(err, StoreError::Timeout), "{err:?}");
    tx.rollback().await.unwrap();
    slow.complete(&lease, &response(1)).await.unwrap();
    let rec = store.get(&k).await.unwrap().unwrap();
    assert_eq!(rec.response, Some(response(1)));

    for code in ["40001", "40P01"] {
        let err = sqlx::raw_sql(&format!(
            "DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '{code}'; END $$"
        ))
        .execute(store.pool())
        .await
        .unwrap_err();
        let err = StoreError::from(PostgresStoreError::from(err));
        assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_rows_are_corrupt_and_left_untouched() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let table = store.table_name();
    let cases = [
        // a truncated header encoding
        (
            "completed",
            "'\\x0000'::bytea",
            "decode(repeat('01', 32), 'hex')",
        ),
        // a 3-byte fingerprint digest
        ("in_progress", "NULL", "'\\x010203'::bytea"),
    ];
    for (state, headers, digest) in cases {
        let k = unique_key("alice");
        sqlx::query(&format!(
            "INSERT INTO \"{table}\" (user_id, route, key, request_hash, fingerprint_version, \
             state, status, response_headers, response, replayable, fence, created_at, \
             expires_at) VALUES ($1, $2, $3, {digest}, 1, '{state}', 200, {headers}, '', true, \
             1, now(), now() + interval '1 day')"
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
    let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM \"{table}\""))
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(rows, 2);
}

/// Every future of the store can be spawned (the gateway runs outcome writes on their own
/// task), including `complete_using` on a transaction and `migrate`.
#[tokio::test]
async fn futures_are_spawnable() {
    let pool = PostgresStore::pool_options()
        .acquire_timeout(Duration::from_millis(100))
        .connect_lazy("postgres://postgres@127.0.0.1:1/test")
        .unwrap();
    let store = PostgresStore::from_pool(pool);
    let k = unique_key("alice");
    let req = request(&k, fp(1), LONG, DAY);
    let lease = idemgate_core::Lease {
        key: k.clone(),
        fence: 1,
        token: req.token,
        expires_at: 0,
    };
    let mut tasks = Vec::new();
    // Spawns `$body` with its own clones of the store, lease, request and key.
    macro_rules! spawn {
        ($s:ident, $l:ident, $r:ident, $k:ident => $body:expr) => {{
            let ($s, $l, $r, $k) = (store.clone(), lease.clone(), req.clone(), k.clone());
            tasks.push(tokio::spawn(async move {
                let _ = (&$l, &$r, &$k);
                $body.map(|_| ()).map_err(StoreError::from)
            }));
        }};
    }
    spawn!(s, l, r, k => s.insert_or_get(&r).await);
    spawn!(s, l, r, k => async {
        let seen = idemgate_core::IdempotencyRecord {
            key: k.clone(),
            fingerprint: r.fingerprint,
            state: idemgate_core::RecordState::Failed,
            fence: 1,
            lease_token: None,
            lease_expires_at: None,
            created_at: 0,
            completed_at: Some(0),
            expires_at: 1,
            response: None,
        };
        s.take_over(&seen, l.token, LONG).await
    }
    .await);
    spawn!(s, l, r, k => s.renew(&l, LONG).await);
    spawn!(s, l, r, k => s.complete(&l, &response(1)).await);
    spawn!(s, l, r, k => s.fail(&l).await);
    spawn!(s, l, r, k => s.release(&l).await);
    spawn!(s, l, r, k => s.get(&k).await);
    spawn!(s, l, r, k => s.purge_expired(std::num::NonZeroU32::MIN).await);
    spawn!(s, l, r, k => s.ping().await);
    spawn!(s, l, r, k => s.migrate().await);
    spawn!(s, l, r, k => async {
        let mut tx = s.pool().begin().await.map_err(PostgresStoreError::from)?;
        s.complete_using(&mut tx, &l, &response(1)).await?;
        tx.commit().await.map_err(PostgresStoreError::from)?;
        Ok::<_, StoreError>(())
    }
    .await);
    for task in tasks {
        let err = task.await.unwrap().unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    }
}

/// A route over the btree's index row size (about 2.7 kB): the server refuses the insert
/// and the lookup (SQLSTATE 54000), a definite answer, so the lifecycle starts no follow-up
/// (one used to poll for 24 h per such request, until the queue was full).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_over_the_index_row_size_is_a_definite_refusal() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let mut k = unique_key("alice");
    // Random text, so the index's compression cannot shrink it under the limit.
    k.route = (0..3000)
        .map(|_| char::from(b'a' + rand::random::<u8>() % 26))
        .collect();
    let err = store
        .insert_or_get(&request(&k, fp(1), LONG, DAY))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Refused(_)), "{err:?}");
    assert!(!err.outcome_unknown(), "{err:?}");
    let source = err.source().expect("source kept");
    let ours = source.downcast_ref::<PostgresStoreError>().expect("ours");
    assert!(matches!(
        ours,
        PostgresStoreError::Sqlx(sqlx::Error::Database(_))
    ));
    let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM \"{}\"", store.table_name()))
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(rows, 0, "nothing was written");
    match store.get(&k).await {
        Ok(found) => assert!(found.is_none()),
        Err(e) => assert!(!e.outcome_unknown(), "{e:?}"),
    }
}
