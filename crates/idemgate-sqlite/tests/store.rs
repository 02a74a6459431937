//! [`SqliteStore`] beyond the conformance suite: persistence, corrupt rows, grouped
//! transactions, stats. Locks, queues and lost files are in `availability.rs`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{insert, key_params, TempStore, DAY, LONG};
use idemgate_core::testing::{fp, request, response, unique_key};
use idemgate_core::{GaugedStore, IdempotencyStore, InsertOutcome, RecordState, StoreError};
use idemgate_sqlite::{SqliteLocation, SqliteOptions, SqliteStore, SqliteStoreError};
use tokio::time::Instant;

#[tokio::test]
async fn completed_record_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemgate.db");
    let k = unique_key("alice");
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    let lease = insert(&store, &k).await;
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
    assert_eq!(version, 4, "0001 to 0004 applied once");
}

#[tokio::test]
async fn corrupt_row_is_reported_and_left_alone() {
    let s = TempStore::open(SqliteOptions::default());
    let k = unique_key("alice");
    let lease = insert(&s, &k).await;
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
        matches!(&err, StoreError::Corrupt { detail } if detail.contains("headers")),
        "{err:?}"
    );
    let err = s
        .insert_or_get(&request(&k, fp(1), LONG, DAY))
        .await
        .unwrap_err();
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
    insert(&s, &other).await;

    // once expired, the corrupt record counts as absent like any other, and is replaced
    raw.execute(
        "UPDATE idempotency_records SET expires_at = 1
         WHERE principal = ?1 AND route = ?2 AND key = ?3",
        (p, r, key),
    )
    .unwrap();
    assert!(s.get(&k).await.unwrap().is_none());
    let lease = insert(&s, &k).await;
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
    // The detail comes from the shared validation, which names the field.
    for (column, value, field) in [
        ("fingerprint", "x'0102'", "fingerprint"),
        ("fence", "'not a number'", "fence"),
        ("status", "70000", "status"),
        ("response_body", "NULL", "body"),
        ("replayable", "7", "replayable"),
        ("expires_at", "'soon'", "expires_at"),
        // a checksum of another type is not "no checksum": it fails like a wrong one
        ("response_checksum", "hex(response_checksum)", "checksum"),
        ("response_checksum", "42", "checksum"),
    ] {
        let k = unique_key("alice");
        let lease = insert(&s, &k).await;
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
            matches!(&err, StoreError::Corrupt { detail } if detail.contains(field)),
            "{column}: {err:?}"
        );
        let err = s
            .insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::Corrupt { .. }),
            "{column}: {err:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_inserts_on_a_file_have_one_winner() {
    let s = Arc::new(TempStore::open(SqliteOptions::default()));
    let k = unique_key("alice");
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (s, k) = (s.clone(), k.clone());
            tokio::spawn(async move { s.insert_or_get(&request(&k, fp(1), LONG, DAY)).await })
        })
        .collect();
    let mut winners = 0;
    for t in tasks {
        if let InsertOutcome::Inserted(_) = t.await.unwrap().unwrap() {
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
                    a.insert_or_get(&req).await
                } else {
                    b.insert_or_get(&req).await
                }
            }));
        }
        let mut winners = 0;
        for t in tasks {
            if let InsertOutcome::Inserted(_) = t.await.unwrap().unwrap() {
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
                let lease = insert(&*s, &k).await;
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
    let raw = s.raw();

    // Hold the write lock so the store thread blocks on a first insert while the rest queue
    // up behind it; they then run as one group.
    raw.execute_batch("BEGIN IMMEDIATE").unwrap();
    let first = tokio::spawn({
        let s = s.clone();
        async move { insert(&*s, &unique_key("alice")).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let queued: Vec<_> = (0..8)
        .map(|i| {
            let (s, bad) = (s.clone(), bad.clone());
            tokio::spawn(async move {
                if i == 4 {
                    // no live row on the read path: it goes on to the writer's group
                    let r = s.insert_or_get(&request(&bad, fp(1), LONG, DAY)).await;
                    assert!(matches!(r, Err(StoreError::Corrupt { .. })), "{r:?}");
                    None
                } else {
                    let k = unique_key("alice");
                    let lease = insert(&*s, &k).await;
                    Some((k, lease))
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Another process writes a damaged live row for `bad` before the group runs.
    let (p, r, key) = key_params(&bad);
    raw.execute(
        "INSERT INTO idempotency_records (principal, route, key, fingerprint,
         fingerprint_version, state, fence, created_at, expires_at)
         VALUES (?1, ?2, ?3, x'00', 1, 'failed', 1, 0, 9000000000000)",
        (p, r, key),
    )
    .unwrap();
    raw.execute_batch("COMMIT").unwrap();
    first.await.unwrap();
    for t in queued {
        if let Some((k, lease)) = t.await.unwrap() {
            assert_eq!(s.get(&k).await.unwrap().unwrap().fence, lease.fence);
        }
    }
}

async fn seed_and_check_stats(s: &SqliteStore, raw: impl FnOnce(&str)) {
    assert_eq!(s.gauges().await.unwrap().records(), 0);
    let done = unique_key("alice");
    let lease = insert(s, &done).await;
    s.complete(&lease, &response(1000)).await.unwrap();
    let stuck = unique_key("alice");
    insert(s, &stuck).await;
    insert(s, &unique_key("alice")).await;
    // seed the past instead of sleeping: one stuck lease, one expired record
    raw(&format!(
        "UPDATE idempotency_records SET lease_expires_at = 1, created_at = 5 WHERE key = '{}';
         UPDATE idempotency_records SET expires_at = 2 WHERE key = '{}';",
        stuck.key.as_str(),
        done.key.as_str()
    ));
    let stats = s.gauges().await.unwrap();
    assert_eq!(stats.records(), 3);
    assert_eq!(stats.body_bytes, Some(1000));
    assert_eq!(stats.oldest_created_at, Some(5));
    assert_eq!(stats.expired, Some(1));
    assert_eq!(stats.stuck_in_progress, 1);
    assert_eq!(s.purge_expired(1.try_into().unwrap()).await.unwrap(), 1);
    assert_eq!(s.gauges().await.unwrap().records(), 2);
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
    let lease = insert(&s, &k).await;
    s.release(&lease).await.unwrap();
    assert!(s.get(&k).await.unwrap().is_none());
    let stats = s.gauges().await.unwrap();
    assert_eq!((stats.records(), stats.oldest_created_at), (0, None));
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
        let lease = insert(&s, &unique_key("alice")).await;
        s.complete(&lease, &response(100)).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while size() <= initial {
        assert!(Instant::now() < deadline, "no checkpoint within 5 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
