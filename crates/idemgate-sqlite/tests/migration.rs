//! A file written by a build that predates the response checksum (schema version 1): it
//! migrates in place, its records stay readable, and a gateway of that older build can keep
//! writing to it next to this one.

mod common;

use std::path::Path;

use common::key_params;
use idemgate_core::testing::{fp, response, unique_key};
use idemgate_core::{
    now_millis, IdempotencyStore, Lease, LeaseToken, RecordState, ScopedKey, StoredResponse,
};
use idemgate_sqlite::{SqliteOptions, SqliteStore};
use rusqlite::{params, Connection};

/// The older build's whole-row write (its acquire), which knows no checksum column.
const OLD_UPSERT: &str = "INSERT INTO idempotency_records (principal, route, key, fingerprint,
    fingerprint_version, state, fence, lease_token, lease_expires_at, status, response_headers,
    response_body, replayable, created_at, completed_at, expires_at)
    VALUES (?1, ?2, ?3, ?4, 1, 'in_progress', ?5, ?6, ?7, NULL, NULL, NULL, NULL, ?8, NULL, ?9)
    ON CONFLICT (principal, route, key) DO UPDATE SET
    fingerprint = excluded.fingerprint, fingerprint_version = excluded.fingerprint_version,
    state = excluded.state, fence = excluded.fence, lease_token = excluded.lease_token,
    lease_expires_at = excluded.lease_expires_at, status = excluded.status,
    response_headers = excluded.response_headers, response_body = excluded.response_body,
    replayable = excluded.replayable, created_at = excluded.created_at,
    completed_at = excluded.completed_at, expires_at = excluded.expires_at";

/// The older build's completion, which knows no checksum column.
const OLD_COMPLETE: &str = "UPDATE idempotency_records SET state = 'completed',
    completed_at = ?6, lease_token = NULL, lease_expires_at = NULL, status = ?7,
    response_headers = ?8, response_body = ?9, replayable = ?10
    WHERE principal = ?1 AND route = ?2 AND key = ?3 AND state = 'in_progress'
    AND fence = ?4 AND lease_token = ?5 AND expires_at > ?6";

fn version(path: &Path) -> i64 {
    Connection::open(path)
        .unwrap()
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap()
}

/// The older build's acquire then complete of `k` with `fence` and `resp`.
fn old_build_writes(conn: &Connection, k: &ScopedKey, fence: i64, resp: &StoredResponse) {
    let (p, r, key) = key_params(k);
    let now = now_millis();
    let far = now + 86_400_000;
    conn.execute(
        OLD_UPSERT,
        params![p, r, key, &fp(1).digest[..], fence, 42, far, now, far],
    )
    .unwrap();
    let n = conn
        .execute(
            OLD_COMPLETE,
            params![
                p,
                r,
                key,
                fence,
                42,
                now,
                resp.status,
                resp.encode_headers(),
                &resp.body[..],
                resp.replayable
            ],
        )
        .unwrap();
    assert_eq!(n, 1);
}

#[tokio::test]
async fn a_version_1_file_migrates_and_keeps_its_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemgate.db");
    let old = Connection::open(&path).unwrap();
    old.pragma_update(None, "journal_mode", "WAL").unwrap();
    old.execute_batch(include_str!("../migrations/0001_idempotency_records.sql"))
        .unwrap();
    old.pragma_update(None, "user_version", 1).unwrap();
    let done = unique_key("alice");
    old_build_writes(&old, &done, 1, &response(10));
    let running = unique_key("alice");
    let (p, r, key) = key_params(&running);
    let far = now_millis() + 86_400_000;
    old.execute(
        OLD_UPSERT,
        params![p, r, key, &fp(1).digest[..], 3, 7, far, now_millis(), far],
    )
    .unwrap();

    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    assert_eq!(version(&path), 4);
    let rec = store.get(&done).await.unwrap().expect("old record kept");
    assert_eq!(rec.state, RecordState::Completed);
    assert_eq!(
        rec.response,
        Some(response(10)),
        "no checksum yet: still valid"
    );
    // a lease taken by the older build completes here, sealed with a checksum
    let lease = Lease {
        key: running.clone(),
        fence: 3,
        token: LeaseToken(7),
        expires_at: far,
    };
    store.complete(&lease, &response(4)).await.unwrap();
    assert_eq!(
        store.get(&running).await.unwrap().unwrap().response,
        Some(response(4))
    );

    // The older build, still running, re-acquires that record once it expired and completes
    // it without a checksum: the stale checksum must not make it look damaged.
    old.execute(
        "UPDATE idempotency_records SET expires_at = 1 WHERE principal = ?1 AND route = ?2 AND key = ?3",
        (p, r, key),
    )
    .unwrap();
    old_build_writes(&old, &running, 4, &response(6));
    let rec = store
        .get(&running)
        .await
        .unwrap()
        .expect("re-acquired record");
    assert_eq!((rec.fence, rec.response), (4, Some(response(6))));
    store.close().await;
}
