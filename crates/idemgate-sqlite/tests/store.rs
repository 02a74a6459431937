//! [`SqliteStore`] beyond the conformance suite: persistence, locks held by other
//! connections, corrupt rows, grouped transactions, stats.

mod common;

use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use common::TempStore;
use idemgate_core::testing::{fp, request, response, unique_key};
use idemgate_core::{AcquireOutcome, IdempotencyStore, Lease, RecordState, ScopedKey, StoreError};
use idemgate_sqlite::{SqliteLocation, SqliteOptions, SqliteStore, SqliteStoreError};
use tokio::time::Instant;

const LONG: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(86_400);

async fn acquire(s: &impl IdempotencyStore, k: &ScopedKey) -> Lease {
    match s.acquire(&request(k, fp(1), LONG, DAY)).await.unwrap() {
        AcquireOutcome::Acquired { lease, .. } => lease,
        AcquireOutcome::Existing { record, .. } => panic!("expected Acquired, got {record:?}"),
    }
}

/// The `SqliteStoreError` behind a `StoreError`, if any.
fn sqlite_source(e: &StoreError) -> Option<&SqliteStoreError> {
    e.source()?.downcast_ref::<SqliteStoreError>()
}

fn key_params(k: &ScopedKey) -> (&str, &str, &str) {
    (&k.principal, &k.route, k.key.as_str())
}

#[tokio::test]
async fn completed_record_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemgate.db");
    let k = unique_key("alice");
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    let lease = acquire(&store, &k).await;
    let resp = response(1 << 20);
    assert!(resp
        .headers
        .iter()
        .any(|(_, v)| std::str::from_utf8(v).is_err()));
    store.complete(&lease, &resp).await.unwrap();
    let before = store.get(&k).await.unwrap().unwrap();
    drop(store);

    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    let after = store.get(&k).await.unwrap().expect("record persisted");
    assert_eq!(after, before);
    assert_eq!(after.response.as_ref(), Some(&resp));
    assert_eq!(after.state, RecordState::Completed);
    store.close().await;
    // the last connection to close checkpointed the WAL into the file and removed it
    assert!(!dir.path().join("idemgate.db-wal").exists());

    // a third open after a clean close: the schema is not migrated twice
    let store = SqliteStore::from_url(
        &format!("sqlite://{}", path.display()),
        SqliteOptions::default(),
    )
    .unwrap();
    assert_eq!(store.get(&k).await.unwrap(), Some(before));
    let version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locked_database_is_unavailable_then_recovers() {
    let s = TempStore::open(SqliteOptions::default().with_busy_timeout(Duration::from_millis(100)));
    let done = unique_key("alice");
    let lease = acquire(&s, &done).await;
    s.complete(&lease, &response(5)).await.unwrap();

    let raw = s.raw();
    raw.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let k = unique_key("alice");
    let started = Instant::now();
    let err = s.acquire(&request(&k, fp(1), LONG, DAY)).await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    let source = sqlite_source(&err).expect("the sqlite error is the source");
    assert!(source.is_unavailable());
    assert!(source.source().is_some(), "the rusqlite error is kept");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "busy_timeout bounds the wait"
    );
    // writers wait, readers do not (WAL): replays keep working
    assert!(s.get(&done).await.unwrap().is_some());
    assert!(
        s.get(&k).await.unwrap().is_none(),
        "the failed acquire wrote nothing"
    );

    raw.execute_batch("COMMIT").unwrap();
    let lease = acquire(&s, &k).await;
    s.complete(&lease, &response(1)).await.unwrap();
}

#[tokio::test]
async fn corrupt_row_is_reported_and_left_alone() {
    let s = TempStore::open(SqliteOptions::default());
    let k = unique_key("alice");
    let lease = acquire(&s, &k).await;
    s.complete(&lease, &response(10)).await.unwrap();
    let garbage: &[u8] = &[0, 0, 0, 16, 0xff];
    let raw = s.raw();
    raw.execute(
        "UPDATE idempotency_records SET response_headers = ?4
         WHERE principal = ?1 AND route = ?2 AND key = ?3",
        rusqlite::params![k.principal, k.route, k.key.as_str(), garbage],
    )
    .unwrap();

    let err = s.get(&k).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt { detail } if detail.contains("response_headers")),
        "{err:?}"
    );
    let err = s.acquire(&request(&k, fp(1), LONG, DAY)).await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");

    let (p, r, key) = key_params(&k);
    let headers: Vec<u8> = raw
        .query_row(
            "SELECT response_headers FROM idempotency_records
             WHERE principal = ?1 AND route = ?2 AND key = ?3",
            (p, r, key),
            |row| row.get(0),
        )
        .expect("the row still exists");
    assert_eq!(headers, garbage);
    // other records are unaffected
    let other = unique_key("alice");
    acquire(&s, &other).await;

    // once expired, the corrupt record counts as absent like any other, and is replaced
    raw.execute(
        "UPDATE idempotency_records SET expires_at = 1
         WHERE principal = ?1 AND route = ?2 AND key = ?3",
        (p, r, key),
    )
    .unwrap();
    assert!(s.get(&k).await.unwrap().is_none());
    let lease = acquire(&s, &k).await;
    s.complete(&lease, &response(2)).await.unwrap();
    assert_eq!(
        s.get(&k).await.unwrap().unwrap().response,
        Some(response(2))
    );
}

#[tokio::test]
async fn undecodable_columns_are_corrupt() {
    let s = TempStore::open(SqliteOptions::default());
    let raw = s.raw();
    for (column, value) in [
        ("fingerprint", "x'0102'"),
        ("fence", "'not a number'"),
        ("status", "70000"),
        ("response_body", "NULL"),
    ] {
        let k = unique_key("alice");
        let lease = acquire(&s, &k).await;
        s.complete(&lease, &response(3)).await.unwrap();
        let (p, r, key) = key_params(&k);
        raw.execute(
            &format!(
                "UPDATE idempotency_records SET {column} = {value}
                 WHERE principal = ?1 AND route = ?2 AND key = ?3"
            ),
            (p, r, key),
        )
        .unwrap();
        let err = s.get(&k).await.unwrap_err();
        assert!(
            matches!(&err, StoreError::Corrupt { detail } if detail.contains(column)),
            "{column}: {err:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_acquires_on_a_file_have_one_winner() {
    let s = Arc::new(TempStore::open(SqliteOptions::default()));
    let k = unique_key("alice");
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (s, k) = (s.clone(), k.clone());
            tokio::spawn(async move { s.acquire(&request(&k, fp(1), LONG, DAY)).await })
        })
        .collect();
    let mut winners = 0;
    for t in tasks {
        if let AcquireOutcome::Acquired { .. } = t.await.unwrap().unwrap() {
            winners += 1;
        }
    }
    assert_eq!(winners, 1);
}

/// Two stores on one file stand for two gateway processes: still one winner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_file_have_one_winner() {
    let a = Arc::new(TempStore::open(SqliteOptions::default()));
    let b = Arc::new(SqliteStore::open(a.db_path(), SqliteOptions::default()).unwrap());
    for _ in 0..10 {
        let k = unique_key("alice");
        let mut tasks = Vec::new();
        for i in 0..32 {
            let k = k.clone();
            let (a, b) = (a.clone(), b.clone());
            tasks.push(tokio::spawn(async move {
                let req = request(&k, fp(1), LONG, DAY);
                if i % 2 == 0 {
                    a.acquire(&req).await
                } else {
                    b.acquire(&req).await
                }
            }));
        }
        let mut winners = 0;
        for t in tasks {
            if let AcquireOutcome::Acquired { .. } = t.await.unwrap().unwrap() {
                winners += 1;
            }
        }
        assert_eq!(winners, 1);
    }
}

/// Many operations on distinct keys, grouped into shared transactions, all land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_operations_all_land() {
    let s = Arc::new(TempStore::open(SqliteOptions::default()));
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move {
                let k = unique_key("alice");
                let lease = acquire(&*s, &k).await;
                if i % 3 == 0 {
                    s.fail(&lease).await.unwrap();
                } else {
                    s.complete(&lease, &response(i)).await.unwrap();
                }
                (i, k)
            })
        })
        .collect();
    for t in tasks {
        let (i, k) = t.await.unwrap();
        let rec = s.get(&k).await.unwrap().unwrap();
        if i % 3 == 0 {
            assert_eq!(rec.state, RecordState::Failed);
        } else {
            assert_eq!(rec.response, Some(response(i)));
        }
    }
}

/// An error in one command of a grouped transaction does not spoil the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_in_a_group_spares_the_others() {
    let s = Arc::new(TempStore::open(SqliteOptions::default()));
    let bad = unique_key("alice");
    let lease = acquire(&*s, &bad).await;
    s.complete(&lease, &response(1)).await.unwrap();
    let raw = s.raw();
    raw.execute(
        "UPDATE idempotency_records SET state = 'failed', fingerprint = x'00'",
        [],
    )
    .unwrap();

    // Hold the write lock so the store thread blocks on a first acquire while the rest queue
    // up behind it; they then run as one group.
    raw.execute_batch("BEGIN IMMEDIATE").unwrap();
    let first = tokio::spawn({
        let s = s.clone();
        async move { acquire(&*s, &unique_key("alice")).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let queued: Vec<_> = (0..8)
        .map(|i| {
            let (s, bad) = (s.clone(), bad.clone());
            tokio::spawn(async move {
                if i == 4 {
                    assert!(matches!(s.get(&bad).await, Err(StoreError::Corrupt { .. })));
                    None
                } else {
                    let k = unique_key("alice");
                    let lease = acquire(&*s, &k).await;
                    Some((k, lease))
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    raw.execute_batch("COMMIT").unwrap();
    first.await.unwrap();
    for t in queued {
        if let Some((k, lease)) = t.await.unwrap() {
            assert_eq!(s.get(&k).await.unwrap().unwrap().fence, lease.fence);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_is_unavailable() {
    let options = SqliteOptions::default()
        .with_queue_capacity(1)
        .with_busy_timeout(Duration::from_secs(5));
    let s = Arc::new(TempStore::open(options));
    let raw = s.raw();
    raw.execute_batch("BEGIN IMMEDIATE").unwrap();
    let spawn_acquire = || {
        let s = s.clone();
        tokio::spawn(async move {
            s.acquire(&request(&unique_key("a"), fp(1), LONG, DAY))
                .await
        })
    };
    let running = spawn_acquire(); // taken by the thread, waiting for the lock
    tokio::time::sleep(Duration::from_millis(100)).await;
    let queued = spawn_acquire(); // fills the queue
    tokio::time::sleep(Duration::from_millis(100)).await;
    let err = s.ping().await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    assert!(matches!(
        sqlite_source(&err),
        Some(SqliteStoreError::QueueFull { capacity: 1 })
    ));
    raw.execute_batch("COMMIT").unwrap();
    running.await.unwrap().unwrap();
    queued.await.unwrap().unwrap();
    s.ping().await.unwrap();
}

async fn seed_and_check_stats(s: &SqliteStore, raw: impl FnOnce(&str)) {
    assert_eq!(s.stats().await.unwrap().rows, 0);
    let done = unique_key("alice");
    let lease = acquire(s, &done).await;
    s.complete(&lease, &response(1000)).await.unwrap();
    let stuck = unique_key("alice");
    acquire(s, &stuck).await;
    acquire(s, &unique_key("alice")).await;
    // seed the past instead of sleeping: one stuck lease, one expired record
    raw(&format!(
        "UPDATE idempotency_records SET lease_expires_at = 1, created_at = 5 WHERE key = '{}';
         UPDATE idempotency_records SET expires_at = 2 WHERE key = '{}';",
        stuck.key.as_str(),
        done.key.as_str()
    ));
    let stats = s.stats().await.unwrap();
    assert_eq!(stats.rows, 3);
    assert_eq!(stats.body_bytes, 1000);
    assert_eq!(stats.oldest_created_at, Some(5));
    assert_eq!(stats.expired_rows, 1);
    assert_eq!(stats.stuck_in_progress, 1);
    assert_eq!(s.purge_expired(1.try_into().unwrap()).await.unwrap(), 1);
    assert_eq!(s.stats().await.unwrap().rows, 2);
}

#[tokio::test]
async fn stats_on_a_file() {
    let s = TempStore::open(SqliteOptions::default());
    let raw = s.raw();
    seed_and_check_stats(&s, |sql| raw.execute_batch(sql).unwrap()).await;
}

#[tokio::test]
async fn in_memory_store_from_url() {
    let s = SqliteStore::from_url("sqlite::memory:", SqliteOptions::default()).unwrap();
    assert_eq!(s.path(), None);
    assert_eq!(s.backend(), "sqlite");
    s.ping().await.unwrap();
    let k = unique_key("alice");
    let lease = acquire(&s, &k).await;
    s.release(&lease).await.unwrap();
    assert!(s.get(&k).await.unwrap().is_none());
    let stats = s.stats().await.unwrap();
    assert_eq!((stats.rows, stats.oldest_created_at), (0, None));
    assert!(matches!(
        SqliteStore::from_url("mysql://x", SqliteOptions::default()),
        Err(SqliteStoreError::InvalidUrl { .. })
    ));
    assert_eq!(
        SqliteLocation::parse("sqlite::memory:").unwrap(),
        SqliteLocation::Memory
    );
}

#[tokio::test]
async fn not_a_database_fails_to_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.db");
    std::fs::write(&path, vec![0x5a; 8192]).unwrap();
    let err = SqliteStore::open(&path, SqliteOptions::default()).unwrap_err();
    assert!(matches!(err, SqliteStoreError::Sqlite(_)), "{err:?}");
}

/// The checkpointer thread copies the WAL into the database file while the store runs (the
/// writer's own automatic checkpoint would wait for 8192 pages).
#[tokio::test]
async fn wal_is_checkpointed_in_the_background() {
    let s = TempStore::open(SqliteOptions::default());
    let size = || std::fs::metadata(s.db_path()).unwrap().len();
    let initial = size();
    for _ in 0..300 {
        let lease = acquire(&s, &unique_key("alice")).await;
        s.complete(&lease, &response(100)).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while size() <= initial {
        assert!(Instant::now() < deadline, "no checkpoint within 5 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
