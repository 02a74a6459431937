//! The migration runner: idempotent, safe to run concurrently, schema and constraints.

use idemgate_core::testing::{fp, inserted, request, unique_key};
use idemgate_core::IdempotencyStore;
use idemgate_postgres::{PostgresStore, PostgresStoreError};

use crate::{common, DAY};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_twice_and_concurrently() {
    let Some(url) = common::url() else {
        return;
    };
    let table = common::table_name();
    let store = PostgresStore::connect(&url)
        .await
        .unwrap()
        .with_table_name(&table)
        .unwrap();
    // Eight replicas starting at once, each on its own connection.
    let starts: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.migrate().await })
        })
        .collect();
    for start in starts {
        start.await.unwrap().unwrap();
    }
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();
    let versions: Vec<i64> = sqlx::query_scalar(&format!(
        "SELECT version FROM \"{table}_migrations\" ORDER BY version"
    ))
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(versions, [1, 2, 3, 4, 5]);

    // The cleanup index covers every state (no partial index).
    let indexdef: String = sqlx::query_scalar(
        "SELECT indexdef FROM pg_indexes WHERE tablename = $1 AND indexname = $2",
    )
    .bind(&table)
    .bind(format!("{table}_expires_at_idx"))
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert!(
        indexdef.contains("(expires_at)") && !indexdef.contains("WHERE"),
        "{indexdef}"
    );

    // The state CHECK constraint refuses unknown states.
    let bogus = sqlx::query(&format!(
        "INSERT INTO \"{table}\" (user_id, route, key, request_hash, fingerprint_version, \
         state, fence, created_at, expires_at) VALUES ('u', 'r', 'k', '\\x00', 1, 'bogus', 1, \
         now(), now())"
    ))
    .execute(store.pool())
    .await
    .unwrap_err();
    let code = bogus.as_database_error().and_then(|e| e.code()).unwrap();
    assert_eq!(code, "23514", "check_violation expected: {bogus}");

    let k = unique_key("alice");
    inserted(
        store
            .insert_or_get(&request(&k, fp(1), crate::LONG, DAY))
            .await
            .unwrap(),
    );
    common::drop_table(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_into_a_schema() {
    let Some(url) = common::url() else {
        return;
    };
    let schema = common::table_name();
    let store = PostgresStore::connect(&url)
        .await
        .unwrap()
        .with_schema(&schema)
        .unwrap()
        .with_table_name("records")
        .unwrap();
    assert_eq!(store.table_name(), format!("{schema}.records"));
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();
    let k = unique_key("alice");
    let lease = inserted(
        store
            .insert_or_get(&request(&k, fp(1), crate::LONG, DAY))
            .await
            .unwrap(),
    );
    store.release(&lease).await.unwrap();
    let tables: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_tables WHERE schemaname = $1")
        .bind(&schema)
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(
        tables, 3,
        "records, records_migrations and records_failovers"
    );
    sqlx::raw_sql(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(store.pool())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_migration_is_refused() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let table = store.table_name();
    sqlx::query(&format!(
        "UPDATE \"{table}_migrations\" SET checksum = 'edited'"
    ))
    .execute(store.pool())
    .await
    .unwrap();
    let err = store.migrate().await.unwrap_err();
    assert!(
        matches!(err, PostgresStoreError::MigrationChanged { version: 1, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn table_names_are_validated() {
    let pool = PostgresStore::pool_options()
        .connect_lazy("postgres://nobody@127.0.0.1:1/none")
        .unwrap();
    let store = || PostgresStore::from_pool(pool.clone());
    assert_eq!(store().table_name(), "idempotency_records");
    for bad in ["", "Records", "a;drop table x", "x\"y", "9lives"] {
        let err = store().with_table_name(bad).unwrap_err();
        assert!(
            matches!(err, PostgresStoreError::InvalidIdentifier { .. }),
            "{bad:?}"
        );
        assert!(store().with_schema(bad).is_err());
    }
}
