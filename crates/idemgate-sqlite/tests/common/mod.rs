//! A file-backed store in a temporary directory that lives as long as the store, and the
//! damage functions of the conformance suite.

#![allow(dead_code)] // each test binary uses part of it

use std::error::Error as _;
use std::ops::Deref;
use std::path::PathBuf;
use std::time::Duration;

use idemgate_core::testing::{fp, request, Damage};
use idemgate_core::{IdempotencyStore, InsertOutcome, Lease, ScopedKey, StoreError};
use idemgate_sqlite::{SqliteOptions, SqliteStore, SqliteStoreError};
use rusqlite::{params, Connection};
use tempfile::TempDir;

pub(crate) const LONG: Duration = Duration::from_secs(60);
pub(crate) const DAY: Duration = Duration::from_secs(86_400);

/// A [`SqliteStore`] on `idemgate.db` in its own temporary directory.
#[derive(Debug)]
pub(crate) struct TempStore {
    // Declared first: dropped (and its thread told to stop) before the directory goes.
    pub(crate) store: SqliteStore,
    pub(crate) dir: TempDir,
}

impl TempStore {
    pub(crate) fn open(options: SqliteOptions) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SqliteStore::open(dir.path().join("idemgate.db"), options).expect("open");
        Self { store, dir }
    }

    pub(crate) fn db_path(&self) -> PathBuf {
        self.dir.path().join("idemgate.db")
    }

    /// A plain connection to the same file, as another process would have.
    pub(crate) fn raw(&self) -> Connection {
        let conn = Connection::open(self.db_path()).expect("raw open");
        conn.busy_timeout(Duration::from_secs(5)).unwrap();
        conn
    }
}

impl Deref for TempStore {
    type Target = SqliteStore;

    fn deref(&self) -> &SqliteStore {
        &self.store
    }
}

idemgate_core::delegate_store!(TempStore, store);
idemgate_core::delegate_admin!(TempStore, store);

/// Inserts `k` (fingerprint 1, 60 s lease, 24 h TTL) and returns the lease.
pub(crate) async fn insert(s: &impl IdempotencyStore, k: &ScopedKey) -> Lease {
    match s
        .insert_or_get(&request(k, fp(1), LONG, DAY))
        .await
        .unwrap()
    {
        InsertOutcome::Inserted(lease) => lease,
        InsertOutcome::Existing { record, .. } => panic!("expected Inserted, got {record:?}"),
    }
}

/// The `SqliteStoreError` behind a `StoreError`, if any.
pub(crate) fn sqlite_source(e: &StoreError) -> Option<&SqliteStoreError> {
    e.source()?.downcast_ref::<SqliteStoreError>()
}

pub(crate) fn key_params(k: &ScopedKey) -> (&str, &str, &str) {
    (&k.principal, &k.route, k.key.as_str())
}

/// Does `damage` to the row of `key` with raw SQL on `conn`, as
/// [`Damage::apply`] does to the memory store's raw record; returns the rows changed. The
/// state CHECK constraint is bypassed for `UnknownState`, as a careless operator would.
pub(crate) fn apply_damage(conn: &Connection, key: &ScopedKey, damage: Damage) -> usize {
    let (p, r, k) = key_params(key);
    let update = |set: &str| {
        let sql = format!(
            "UPDATE idempotency_records SET {set}
             WHERE principal = ?1 AND route = ?2 AND key = ?3"
        );
        conn.execute(&sql, params![p, r, k]).unwrap()
    };
    match damage {
        Damage::TruncateBody => {
            update("response_body = substr(response_body, 1, max(length(response_body) - 7, 0))")
        }
        Damage::InvalidStatus => update("status = 1000"),
        Damage::AlteredStatus => update("status = 200"),
        Damage::DropHeaders => update("response_headers = NULL"),
        Damage::DropBody => update("response_body = NULL"),
        Damage::FlipChecksum => {
            let mut sum: Vec<u8> = conn
                .query_row(
                    "SELECT response_checksum FROM idempotency_records
                     WHERE principal = ?1 AND route = ?2 AND key = ?3",
                    params![p, r, k],
                    |row| row.get(0),
                )
                .unwrap();
            sum[0] ^= 1;
            conn.execute(
                "UPDATE idempotency_records SET response_checksum = ?4
                 WHERE principal = ?1 AND route = ?2 AND key = ?3",
                params![p, r, k, sum],
            )
            .unwrap()
        }
        Damage::UnknownState => {
            conn.pragma_update(None, "ignore_check_constraints", true)
                .unwrap();
            let n = update("state = 'done'");
            conn.pragma_update(None, "ignore_check_constraints", false)
                .unwrap();
            n
        }
        Damage::DropChecksum => update("response_checksum = NULL"),
    }
}

/// The conformance suite's damage function for a file: raw SQL on a separate connection.
pub(crate) async fn damage(s: &TempStore, key: &ScopedKey, damage: Damage) {
    assert_eq!(apply_damage(&s.raw(), key, damage), 1, "{damage:?}");
}

/// The damage function for an in-memory store, which no other connection can open: the same
/// SQL, run on the store's own connection through the `testing` hook.
pub(crate) async fn damage_in_memory(s: &SqliteStore, key: &ScopedKey, damage: Damage) {
    let key = key.clone();
    let changed = s
        .with_writer_connection(move |conn| apply_damage(conn, &key, damage))
        .await
        .unwrap();
    assert_eq!(changed, 1, "{damage:?}");
}
