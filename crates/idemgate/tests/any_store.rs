//! `AnyStore::from_url` finds each store by its scheme: a record written through it lands
//! in the store the URL names. PostgreSQL and Redis run when `IDEMGATE_TEST_DATABASE_URL` /
//! `IDEMGATE_TEST_REDIS_URL` are set (each case in a schema or under keys of its own, removed
//! at the end), and are skipped with a message otherwise.

use std::time::Duration;

use idemgate::{AnyStore, AnyStoreError, IdempotencyStore};
use idemgate_core::testing::{fp, request, unique_key};
use idemgate_core::InsertOutcome;

/// Inserts a fresh key through `store`, reads it back, then releases it (nothing is left).
async fn round_trip(store: &AnyStore) {
    let key = unique_key("any-store");
    let req = request(
        &key,
        fp(1),
        Duration::from_secs(10),
        Duration::from_secs(60),
    );
    let InsertOutcome::Inserted(lease) = store.insert_or_get(&req).await.unwrap() else {
        panic!("a fresh key is inserted");
    };
    assert!(
        store.get(&key).await.unwrap().is_some(),
        "the record is there"
    );
    store.release(&lease).await.unwrap();
    assert!(store.get(&key).await.unwrap().is_none(), "released");
}

#[tokio::test]
async fn memory_and_unknown_schemes() {
    let store = AnyStore::from_url("memory://").await.unwrap();
    assert_eq!(store.backend(), "memory");
    round_trip(&store).await;
    let err = AnyStore::from_url("mysql://app:secret@db/pay")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, AnyStoreError::UnknownScheme { scheme, .. } if scheme == "mysql"),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("memory://") && !text.contains("secret"),
        "{text}"
    );
    // A value without a scheme (a secret pasted into the wrong field) is not repeated.
    let err = AnyStore::from_url("S3CRETpw").await.unwrap_err();
    assert!(matches!(err, AnyStoreError::NoScheme { .. }), "{err:?}");
    assert!(!err.to_string().contains("S3CRET"), "{err}");
    let err = AnyStore::from_url("memory://x").await.unwrap_err();
    assert!(matches!(err, AnyStoreError::Memory), "{err:?}");
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_by_scheme() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("any.db").display());
    let store = AnyStore::from_url(&url).await.unwrap();
    assert!(matches!(store, AnyStore::Sqlite(_)), "{store:?}");
    round_trip(&store).await;
    assert!(dir.path().join("any.db").exists());
    let err = AnyStore::from_url("sqlite://").await.unwrap_err();
    assert!(matches!(err, AnyStoreError::Sqlite(_)), "{err:?}");
    assert!(err.to_string().contains("path is empty"), "{err}");
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_by_scheme() {
    let Ok(url) = std::env::var("IDEMGATE_TEST_DATABASE_URL") else {
        eprintln!("IDEMGATE_TEST_DATABASE_URL is unset: skipping the PostgreSQL case");
        return;
    };
    let schema = format!("idem_any_{:016x}", rand_suffix());
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(&pool)
        .await
        .unwrap();
    // The schema through the URL: `from_url` takes no other setting.
    let sep = if url.contains('?') { '&' } else { '?' };
    let scoped = format!("{url}{sep}options=-c%20search_path%3D{schema}");
    let store = AnyStore::from_url(&scoped).await.unwrap();
    assert!(matches!(store, AnyStore::Postgres(_)), "{store:?}");
    store.migrate().await.unwrap();
    round_trip(&store).await;
    drop(store);
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&pool)
        .await
        .unwrap();
    let err = AnyStore::from_url("postgres://app:secret@db:port/pay")
        .await
        .unwrap_err();
    assert!(matches!(err, AnyStoreError::Postgres(_)), "{err:?}");
    assert!(!err.to_string().contains("secret"), "{err}");
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn redis_by_scheme() {
    let Ok(url) = std::env::var("IDEMGATE_TEST_REDIS_URL") else {
        eprintln!("IDEMGATE_TEST_REDIS_URL is unset: skipping the Redis case");
        return;
    };
    let store = AnyStore::from_url(&url).await.unwrap();
    assert!(matches!(store, AnyStore::Redis(_)), "{store:?}");
    // Under the default prefix, on a key of its own that `round_trip` removes.
    round_trip(&store).await;
    let err = AnyStore::from_url("redis+cluster://:secret@a:1,,b:2")
        .await
        .unwrap_err();
    assert!(matches!(err, AnyStoreError::Redis(_)), "{err:?}");
    assert!(!err.to_string().contains("secret"), "{err}");
}

#[cfg(feature = "client")]
#[tokio::test]
async fn key_service_by_scheme() {
    let store = AnyStore::from_url("idemgate://127.0.0.1:1").await.unwrap();
    assert!(matches!(store, AnyStore::KeyService(_)), "{store:?}");
    let err = AnyStore::from_url("idemgate://user:pw@h:1")
        .await
        .unwrap_err();
    assert!(matches!(err, AnyStoreError::KeyService(_)), "{err:?}");
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}
