//! Bounded store calls: a locked row or a stuck insert fails a call with an error after the
//! statement timeout (default 2 s) instead of holding the request.

use std::future::Future;
use std::time::Duration;

use idemgate_core::testing::{fp, inserted, request, response, unique_key};
use idemgate_core::{IdempotencyStore, LeaseToken, ScopedKey, StoreError};
use idemgate_postgres::{PostgresOptions, PostgresStore};
use sqlx::{Connection, PgConnection};
use tokio::time::Instant;

use crate::{common, DAY, LONG};

/// Generous: the default statement timeout is 2 s.
const BOUND: Duration = Duration::from_secs(10);

/// Runs a store call that must fail within [`BOUND`]; returns its error.
async fn fails_in_time<T: std::fmt::Debug>(
    what: &str,
    call: impl Future<Output = Result<T, StoreError>>,
) -> StoreError {
    let began = Instant::now();
    let out = tokio::time::timeout(BOUND, call)
        .await
        .unwrap_or_else(|_| panic!("{what} hung past {BOUND:?}"));
    let err = out.expect_err(what);
    assert!(began.elapsed() < BOUND, "{what} took {:?}", began.elapsed());
    err
}

/// A connection of its own (not the store's pool), as another process would hold.
async fn other_connection() -> PgConnection {
    PgConnection::connect(&common::url().unwrap())
        .await
        .unwrap()
}

fn where_key(table: &str) -> String {
    format!("\"{table}\" WHERE user_id = $1 AND route = $2 AND key = $3")
}

/// `sql` with the key bound as `$1..$3`, on `conn`.
async fn exec(conn: &mut PgConnection, sql: &str, k: &ScopedKey) {
    sqlx::query(sql)
        .bind(&k.principal)
        .bind(&k.route)
        .bind(k.key.as_str())
        .execute(conn)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_locked_elsewhere_fails_writes_in_bounded_time() {
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
    let seen = store.get(&k).await.unwrap().unwrap();
    let mut other = other_connection().await;
    sqlx::raw_sql("BEGIN").execute(&mut other).await.unwrap();
    let lock = format!(
        "SELECT 1 FROM {} FOR UPDATE",
        where_key(&store.table_name())
    );
    exec(&mut other, &lock, &k).await;

    let err = fails_in_time("complete", store.complete(&lease, &response(1))).await;
    assert!(matches!(err, StoreError::Timeout), "{err:?}");
    let err = fails_in_time("renew", store.renew(&lease, LONG)).await;
    assert!(matches!(err, StoreError::Timeout), "{err:?}");
    let token = LeaseToken::random();
    let err = fails_in_time("take_over", store.take_over(&seen, token, LONG)).await;
    assert!(matches!(err, StoreError::Timeout), "{err:?}");
    // Reads take no lock: a retry still finds the record at once.
    assert!(store.get(&k).await.unwrap().is_some());

    sqlx::raw_sql("ROLLBACK").execute(&mut other).await.unwrap();
    store.complete(&lease, &response(1)).await.unwrap();
    other.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insert_blocked_elsewhere_fails_in_bounded_time() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let table = store.table_name();
    // Another transaction inserted the key and neither commits nor rolls back.
    let k = unique_key("alice");
    let mut other = other_connection().await;
    sqlx::raw_sql("BEGIN").execute(&mut other).await.unwrap();
    let insert = format!(
        "INSERT INTO \"{table}\" (user_id, route, key, request_hash, fingerprint_version, \
         state, fence, lease_token, lease_expires_at, created_at, expires_at) \
         VALUES ($1, $2, $3, decode(repeat('01', 32), 'hex'), 1, 'in_progress', 1, 7, \
         now() + interval '1 minute', now(), now() + interval '1 day')"
    );
    exec(&mut other, &insert, &k).await;
    let req = request(&k, fp(1), LONG, DAY);
    let err = fails_in_time("insert_or_get", store.insert_or_get(&req)).await;
    assert!(matches!(err, StoreError::Timeout), "{err:?}");
    sqlx::raw_sql("ROLLBACK").execute(&mut other).await.unwrap();
    inserted(store.insert_or_get(&req).await.unwrap());

    // An expired record locked elsewhere: it is read without a lock, and its replacement
    // waits for the lock until the statement timeout.
    let k = unique_key("alice");
    let short = request(
        &k,
        fp(1),
        Duration::from_millis(100),
        Duration::from_millis(200),
    );
    inserted(store.insert_or_get(&short).await.unwrap());
    tokio::time::sleep(Duration::from_millis(350)).await;
    sqlx::raw_sql("BEGIN").execute(&mut other).await.unwrap();
    exec(
        &mut other,
        &format!("SELECT 1 FROM {} FOR UPDATE", where_key(&table)),
        &k,
    )
    .await;
    let req = request(&k, fp(1), LONG, DAY);
    let err = fails_in_time("insert_or_get (expired)", store.insert_or_get(&req)).await;
    assert!(matches!(err, StoreError::Timeout), "{err:?}");
    sqlx::raw_sql("ROLLBACK").execute(&mut other).await.unwrap();
    inserted(store.insert_or_get(&req).await.unwrap());
    other.close().await.unwrap();
}

async fn show_statement_timeout(store: &PostgresStore) -> String {
    sqlx::query_scalar("SHOW statement_timeout")
        .fetch_one(store.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn statement_timeout_is_set_on_every_connection() {
    let Some(url) = common::url() else {
        return;
    };
    assert_eq!(
        PostgresOptions::default().statement_timeout(),
        Some(Duration::from_secs(2))
    );
    let store = PostgresStore::connect(&url).await.unwrap();
    assert_eq!(show_statement_timeout(&store).await, "2s");
    let options = PostgresOptions::new().with_statement_timeout(Some(Duration::from_millis(300)));
    let store = PostgresStore::connect_with(&url, &options).await.unwrap();
    assert_eq!(show_statement_timeout(&store).await, "300ms");
    // A statement timeout in the URL wins over the option.
    let sep = if url.contains('?') { '&' } else { '?' };
    let in_url = format!("{url}{sep}options=-c%20statement_timeout%3D5s");
    let store = PostgresStore::connect_with(&in_url, &options)
        .await
        .unwrap();
    assert_eq!(show_statement_timeout(&store).await, "5s");
    // `None` keeps the server's setting; a pool of one's own gets the option through
    // `connect_options`.
    let server_default: String = {
        let mut conn = PgConnection::connect(&url).await.unwrap();
        sqlx::query_scalar("SHOW statement_timeout")
            .fetch_one(&mut conn)
            .await
            .unwrap()
    };
    let none = PostgresOptions::new().with_statement_timeout(None);
    let store = PostgresStore::connect_with(&url, &none).await.unwrap();
    assert_eq!(show_statement_timeout(&store).await, server_default);
    let pool = options
        .pool_options()
        .connect_with(options.connect_options(&url).unwrap())
        .await
        .unwrap();
    assert_eq!(
        show_statement_timeout(&PostgresStore::from_pool(pool)).await,
        "300ms"
    );
}
