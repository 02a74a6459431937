//! A file-backed store in a temporary directory that lives as long as the store.

#![allow(dead_code)] // each test binary uses part of it

use std::num::NonZeroU32;
use std::ops::Deref;
use std::path::PathBuf;
use std::time::Duration;

use idemgate_core::{
    AcquireOutcome, AcquireRequest, IdempotencyRecord, IdempotencyStore, Lease, ScopedKey,
    StoreError, StoredResponse, UnixMillis,
};
use idemgate_sqlite::{SqliteOptions, SqliteStore};
use tempfile::TempDir;

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
    pub(crate) fn raw(&self) -> rusqlite::Connection {
        let conn = rusqlite::Connection::open(self.db_path()).expect("raw open");
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

impl IdempotencyStore for TempStore {
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, StoreError> {
        self.store.acquire(req).await
    }
    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<UnixMillis, StoreError> {
        self.store.renew(lease, ttl).await
    }
    async fn complete(&self, lease: &Lease, r: &StoredResponse) -> Result<(), StoreError> {
        self.store.complete(lease, r).await
    }
    async fn fail(&self, lease: &Lease) -> Result<(), StoreError> {
        self.store.fail(lease).await
    }
    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.store.release(lease).await
    }
    async fn get(&self, key: &ScopedKey) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.store.get(key).await
    }
    async fn purge_expired(&self, batch: NonZeroU32) -> Result<u64, StoreError> {
        self.store.purge_expired(batch).await
    }
    async fn ping(&self) -> Result<(), StoreError> {
        self.store.ping().await
    }
    fn backend(&self) -> &'static str {
        self.store.backend()
    }
}
