//! [`SqliteStore`]: the [`IdempotencyStore`] on an embedded SQLite database.

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::Duration;

use idemgate_core::{
    AcquireOutcome, AcquireRequest, IdempotencyRecord, IdempotencyStore, Lease, ScopedKey,
    StoreError, StoredResponse, UnixMillis,
};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};

use crate::checkpoint::Checkpointer;
use crate::error::{Result, SqliteStoreError};
use crate::ops::{self, Completion};
use crate::options::{SqliteLocation, SqliteOptions};
use crate::schema;
use crate::worker::{Command, Reply, Worker};

/// An [`IdempotencyStore`] on SQLite (WAL mode), the gateway's default store.
///
/// One dedicated OS thread owns the connection; operations are queued to it over a bounded
/// channel (capacity [`SqliteOptions::queue_capacity`]) and answered through a oneshot. The
/// thread runs whatever is queued, up to [`SqliteOptions::max_batch`] commands, in one
/// transaction, so concurrent requests share commits. Time is the process wall clock in ms
/// since the epoch ([`idemgate_core::now_millis`]), the same clock as the memory store.
///
/// Share it between tasks with an `Arc` (`Arc<SqliteStore>` is an [`IdempotencyStore`] too).
/// The thread stops once the store is dropped and the commands already queued have run;
/// [`SqliteStore::close`] waits for that.
///
/// # Errors
/// Every operation fails with [`StoreError::Unavailable`] when the queue is full, the thread
/// has stopped, or the database stays locked by another process for longer than
/// [`SqliteOptions::busy_timeout`]; with [`StoreError::Corrupt`] when a live stored row
/// cannot be decoded (the row is left untouched; once past its `expires_at` it counts as
/// absent, like any expired record). The source of the error is a [`SqliteStoreError`].
///
/// # Cancel safety
/// Dropping an operation's future does not cancel a command already queued: it still runs.
/// A dropped `acquire` may thus leave an `in_progress` record nobody holds; it counts as in
/// flight until its lease expires, then is taken over.
#[derive(Debug)]
pub struct SqliteStore {
    tx: mpsc::Sender<Command>,
    exited: oneshot::Receiver<()>,
    /// The database file, for [`SqliteStore::stats`]'s own connection; `None` in memory.
    path: Option<PathBuf>,
    options: SqliteOptions,
}

/// What a store holds, for metrics. See [`SqliteStore::stats`].
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[non_exhaustive]
pub struct SqliteStats {
    /// Records held, expired ones not yet purged included.
    pub rows: u64,
    /// Sum of the stored response bodies, in bytes.
    pub body_bytes: u64,
    /// `created_at` of the oldest record held, in ms since the epoch; `None` when empty.
    pub oldest_created_at: Option<UnixMillis>,
    /// Records past their `expires_at`, waiting to be purged.
    pub expired_rows: u64,
    /// Live `in_progress` records whose lease has expired (or is missing): their holder died
    /// and no retry has taken them over yet.
    pub stuck_in_progress: u64,
}

impl SqliteStore {
    /// Opens (creating it if missing) the database file at `path`, sets its pragmas
    /// (`journal_mode=WAL`, `synchronous`, `busy_timeout`), migrates its schema, and starts
    /// the store thread. Blocks the calling thread while doing so (call it at startup).
    ///
    /// # Errors
    /// [`SqliteStoreError::Sqlite`] if the file cannot be opened or migrated (e.g. it is not
    /// a database, or stays locked past the busy timeout); [`SqliteStoreError::SchemaVersion`]
    /// if a newer build migrated it; [`SqliteStoreError::Spawn`] if the thread cannot start.
    pub fn open(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self> {
        Self::open_location(SqliteLocation::File(path.as_ref().to_owned()), options)
    }

    /// Opens a private in-memory database with default options (for tests). Nothing survives
    /// the store.
    ///
    /// # Errors
    /// As [`SqliteStore::open`].
    pub fn open_in_memory() -> Result<Self> {
        Self::open_location(SqliteLocation::Memory, SqliteOptions::default())
    }

    /// Opens the database a URL names: `sqlite://./idemgate.db`, `sqlite:///abs/path.db`,
    /// `sqlite::memory:` (see [`SqliteLocation::parse`]).
    ///
    /// # Errors
    /// [`SqliteStoreError::InvalidUrl`], or as [`SqliteStore::open`].
    pub fn from_url(url: &str, options: SqliteOptions) -> Result<Self> {
        Self::open_location(SqliteLocation::parse(url)?, options)
    }

    /// Opens the database at `location`.
    ///
    /// # Errors
    /// As [`SqliteStore::open`].
    pub fn open_location(location: SqliteLocation, options: SqliteOptions) -> Result<Self> {
        let conn = schema::open_writer(&location, &options)?;
        let path = match location {
            SqliteLocation::Memory => None,
            // Absolute, so stats() finds the file even if the working directory changes.
            SqliteLocation::File(p) => Some(std::fs::canonicalize(&p).unwrap_or(p)),
        };
        let (tx, rx) = mpsc::channel(options.queue_capacity.max(1));
        let (exited_tx, exited) = oneshot::channel();
        let checkpointer = path.as_deref().map(Checkpointer::spawn).transpose()?;
        let worker = Worker::new(conn, checkpointer, options.max_batch);
        std::thread::Builder::new()
            .name("idemgate-sqlite".into())
            .spawn(move || worker.run(rx, exited_tx))
            .map_err(SqliteStoreError::Spawn)?;
        Ok(Self {
            tx,
            exited,
            path,
            options,
        })
    }

    /// The database file (absolute when it could be resolved); `None` for an in-memory store.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Counts what the store holds: rows, body bytes, the oldest record, expired rows and
    /// stuck `in_progress` rows.
    ///
    /// It scans the whole table (O(rows)), so call it at metrics-scrape intervals, not per
    /// request. On a file it runs on a read-only connection of its own, on a blocking thread,
    /// so it never delays store operations (in WAL mode readers do not block the writer); in
    /// memory it runs on the store thread.
    ///
    /// # Errors
    /// As the store operations ([`StoreError::Unavailable`] if the file cannot be read).
    pub async fn stats(&self) -> Result<SqliteStats, StoreError> {
        let Some(path) = &self.path else {
            return self.call(Command::Stats).await;
        };
        let (path, options) = (path.clone(), self.options.clone());
        let scan = tokio::task::spawn_blocking(move || {
            let conn = schema::open_reader(&path, &options)?;
            ops::stats(&conn)
        });
        match scan.await {
            Ok(stats) => Ok(stats?),
            Err(e) => match e.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(_) => Err(SqliteStoreError::Closed.into()),
            },
        }
    }

    /// Stops the store thread once the commands already queued have run, closes the
    /// database, and waits for both.
    pub async fn close(self) {
        let Self { tx, exited, .. } = self;
        drop(tx);
        // An error means the thread is gone already.
        let _ = exited.await;
    }

    /// Queues a command and waits for its answer.
    async fn call<T>(&self, command: impl FnOnce(Reply<T>) -> Command) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.tx.try_send(command(tx)).map_err(|e| match e {
            TrySendError::Full(_) => SqliteStoreError::QueueFull {
                capacity: self.tx.max_capacity(),
            },
            TrySendError::Closed(_) => SqliteStoreError::Closed,
        })?;
        rx.await.map_err(|_| SqliteStoreError::Closed)?
    }
}

impl IdempotencyStore for SqliteStore {
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, StoreError> {
        self.call(|tx| Command::Acquire(req.clone(), tx)).await
    }

    async fn renew(&self, lease: &Lease, lease_ttl: Duration) -> Result<UnixMillis, StoreError> {
        self.call(|tx| Command::Renew(lease.clone(), lease_ttl, tx))
            .await
    }

    async fn complete(&self, lease: &Lease, response: &StoredResponse) -> Result<(), StoreError> {
        let completion = Completion {
            status: response.status,
            headers: response.encode_headers(),
            body: response.body.clone(),
            replayable: response.replayable,
        };
        self.call(|tx| Command::Complete(lease.clone(), completion, tx))
            .await
    }

    async fn fail(&self, lease: &Lease) -> Result<(), StoreError> {
        self.call(|tx| Command::Fail(lease.clone(), tx)).await
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.call(|tx| Command::Release(lease.clone(), tx)).await
    }

    async fn get(&self, key: &ScopedKey) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.call(|tx| Command::Get(key.clone(), tx)).await
    }

    async fn purge_expired(&self, batch: NonZeroU32) -> Result<u64, StoreError> {
        self.call(|tx| Command::Purge(batch.get(), tx)).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.call(Command::Ping).await
    }

    fn backend(&self) -> &'static str {
        "sqlite"
    }
}
