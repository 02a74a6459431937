//! [`SqliteStore`]: the [`IdempotencyStore`] on an embedded SQLite database.

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use idemgate_core::{
    now_millis, IdempotencyRecord, IdempotencyStore, InsertOutcome, InsertRequest, Lease,
    LeaseToken, Peeked, ScopedKey, StoreError, StoredResponse, UnixMillis,
};
use rusqlite::Connection;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};

use crate::checkpoint::Checkpointer;
use crate::error::{Result, SqliteStoreError};
use crate::file::DbFile;
use crate::ops::{self, Completion};
use crate::options::{SqliteLocation, SqliteOptions, Synchronous};
use crate::readers::Readers;
use crate::row::read_live;
use crate::schema;
use crate::worker::{Access, Command, Worker};
use crate::writer::Writer;

/// An [`IdempotencyStore`] on SQLite (WAL mode), the gateway's default store.
///
/// One dedicated OS thread runs the writes on the read-write connection; they are queued to
/// it over a bounded channel (capacity [`SqliteOptions::queue_capacity`]) and answered
/// through a oneshot. The thread runs whatever is queued, up to [`SqliteOptions::max_batch`]
/// commands, in one transaction, so concurrent requests share commits. A single-statement
/// write that is the only one in progress runs on the caller's thread instead, when the
/// connection is free and nothing makes it wait (no lock held by another process, no `fsync`:
/// [`Synchronous::Normal`]), which saves two thread wake-ups per write at low load. On a file, reads
/// ([`IdempotencyStore::get`], the first look of [`IdempotencyStore::insert_or_get`],
/// [`idemgate_core::GaugedStore::gauges`]) run on a small pool of read-only connections instead
/// ([`SqliteOptions::readers`]), so a replay or a `409` never queues behind writes nor waits
/// for the write lock; only a key with no live record goes on to the writer, which inserts
/// it atomically. In memory everything runs on the store thread. Time is the process wall
/// clock in ms since the epoch ([`idemgate_core::now_millis`]), the same clock as the
/// memory store.
///
/// Share it between tasks with an `Arc` (`Arc<SqliteStore>` is an [`IdempotencyStore`] too).
/// The thread stops once the store is dropped and the commands already queued have run;
/// [`SqliteStore::close`] waits for that.
///
/// # Queue
/// When the queue is full, new work is refused at once with [`StoreError::Refused`]
/// ([`SqliteStoreError::QueueFull`]): an insert that reaches the writer, and a take-over.
/// Every other operation (complete, fail, release, renew, purge, ping) waits for room, so the
/// outcome of a request that already ran is never dropped because the store is busy.
///
/// # Errors
/// Operations fail with [`StoreError::Refused`] (nothing was written) when new work meets a
/// full queue, the database stays locked by another process for longer than
/// [`SqliteOptions::busy_timeout`], or a database file (or its `-wal` or `-shm`) was deleted,
/// replaced or truncated; with [`StoreError::Unavailable`] when the thread has stopped or
/// I/O failed (the outcome is unknown); with
/// [`StoreError::Corrupt`] when a live stored row fails validation (the row is left
/// untouched; once past its `expires_at` it counts as absent, like any expired record). The
/// source of the error is a [`SqliteStoreError`].
///
/// # Cancel safety
/// Dropping an operation's future does not cancel a command already queued: it still runs.
/// A dropped `insert_or_get` may thus leave an `in_progress` record nobody holds; it counts
/// as in flight until its lease expires.
#[derive(Debug)]
pub struct SqliteStore {
    // Declared first: the read-only connections close before the writer, whose close (the
    // last connection) then checkpoints the WAL and removes it.
    readers: Option<Arc<Readers>>,
    tx: mpsc::Sender<Command>,
    /// The read-write connection, for writes run on the caller's thread.
    writer: Arc<Writer>,
    exited: oneshot::Receiver<()>,
    /// The database file; `None` in memory.
    path: Option<PathBuf>,
    /// The writer's `PRAGMA synchronous`, for [`idemgate_core::GaugedStore::durability`].
    pub(crate) synchronous: Synchronous,
}

/// Whether an operation may be refused when the queue is full.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Admission {
    /// New work: refused at once ([`SqliteStoreError::QueueFull`]).
    Refuse,
    /// Outcomes of work already done, and the rest: waits for room.
    Wait,
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
        let file = match location {
            SqliteLocation::Memory => None,
            // Absolute, so the readers find the file even if the working directory changes.
            SqliteLocation::File(p) => Some(Arc::new(DbFile::new(
                std::fs::canonicalize(&p).unwrap_or(p),
            ))),
        };
        let readers = file
            .as_ref()
            .map(|f| Readers::new(Arc::clone(f), options.busy_timeout, options.readers))
            .map(Arc::new);
        let (tx, rx) = mpsc::channel(options.queue_capacity.max(1));
        let (exited_tx, exited) = oneshot::channel();
        let checkpointer = file
            .as_ref()
            .map(|f| Checkpointer::spawn(Arc::clone(f)))
            .transpose()?;
        let path = file.as_ref().map(|f| f.path().to_owned());
        let writer = Arc::new(Writer::new(
            conn,
            file,
            options.busy_timeout,
            // A commit that fsyncs is never run on the caller's (async runtime) thread.
            options.synchronous == Synchronous::Normal,
            checkpointer.as_ref().and_then(Checkpointer::thread),
        ));
        let worker = Worker::new(Arc::clone(&writer), checkpointer, options.max_batch);
        std::thread::Builder::new()
            .name("idemgate-sqlite".into())
            .spawn(move || worker.run(rx, exited_tx))
            .map_err(SqliteStoreError::Spawn)?;
        Ok(Self {
            readers,
            tx,
            writer,
            exited,
            path,
            synchronous: options.synchronous,
        })
    }

    /// The database file (absolute when it could be resolved); `None` for an in-memory store.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Stops the store thread once the commands already queued have run, closes the
    /// database, and waits for both.
    pub async fn close(self) {
        if let Some(readers) = self.readers {
            readers.close().await;
        }
        drop(self.tx);
        // An error means the thread is gone already.
        let _ = self.exited.await;
    }

    /// Runs `op` on the store thread's connection (tests only: damaging rows behind the
    /// store's back in an in-memory database). Not part of the supported API.
    ///
    /// # Errors
    /// As the store operations.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub async fn with_writer_connection<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> T + Send + 'static,
    {
        self.write(Admission::Wait, Access::Write, move |c| Ok(op(c)))
            .await
    }

    /// Queues `op` for the store thread and waits for its answer.
    pub(crate) async fn write<T, F>(
        &self,
        admit: Admission,
        access: Access,
        op: F,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let _writing = self.writer.enter();
        let (reply, answer) = oneshot::channel();
        let command = Command::new(access, op, reply);
        match admit {
            Admission::Refuse => self.tx.try_send(command).map_err(|e| match e {
                TrySendError::Full(_) => SqliteStoreError::QueueFull {
                    capacity: self.tx.max_capacity(),
                },
                TrySendError::Closed(_) => SqliteStoreError::Closed,
            })?,
            Admission::Wait => self
                .tx
                .send(command)
                .await
                .map_err(|_| SqliteStoreError::Closed)?,
        }
        answer.await.map_err(|_| SqliteStoreError::Closed)?
    }

    /// As [`SqliteStore::write`] for a single-statement `op`, run on this thread instead
    /// when it is the only write in progress and the connection is free
    /// ([`Writer::try_inline`]). Concurrent writes go to the queue and share transactions.
    pub(crate) async fn write_one<T, F>(
        &self,
        admit: Admission,
        access: Access,
        op: F,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> Result<T> + Send + 'static,
    {
        let writing = self.writer.enter();
        if writing.alone() {
            if let Some(done) = self.writer.try_inline(&op) {
                return done.map_err(Into::into);
            }
        }
        drop(writing);
        self.write(admit, access, op).await
    }

    /// Runs the read-only `op` on the read path (a file), or on the store thread (memory).
    pub(crate) async fn read<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> Result<T> + Send + 'static,
    {
        match &self.readers {
            Some(readers) => Ok(readers.run(op).await?),
            None => self.write(Admission::Wait, Access::Read, op).await,
        }
    }

    /// Runs the lease holder's write `op` on the store thread (waiting for room in the
    /// queue); its `None` means the lease is stale: [`StoreError::LeaseLost`].
    async fn held<T, F>(&self, lease: &Lease, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Fn(&Connection, &Lease) -> Result<Option<T>> + Send + 'static,
    {
        let lease = lease.clone();
        let written = self
            .write_one(Admission::Wait, Access::Write, move |c| op(c, &lease))
            .await?;
        written.ok_or(StoreError::LeaseLost)
    }
}

impl IdempotencyStore for SqliteStore {
    async fn insert_or_get(&self, req: &InsertRequest) -> Result<InsertOutcome, StoreError> {
        // A live record is answered from the read path, without the write lock.
        if let Peeked::Live { record, now } = self.peek(&req.key).await? {
            return Ok(InsertOutcome::Existing { record, now });
        }
        self.insert_or_get_unseen(req).await
    }

    /// The read path of `insert_or_get`, on a read-only connection (on the calling thread
    /// when one is idle); [`Peeked::NotRead`] in memory, where there is no read path.
    async fn peek(&self, key: &ScopedKey) -> Result<Peeked, StoreError> {
        let Some(readers) = &self.readers else {
            return Ok(Peeked::NotRead);
        };
        let key = key.clone();
        let peeked = readers.run(move |c| {
            let now = now_millis();
            Ok(match read_live(c, &key, now)? {
                Some(record) => Peeked::Live { record, now },
                None => Peeked::Absent,
            })
        });
        Ok(peeked.await?)
    }

    /// One plain insert first (the key had no live record a moment ago, so it usually has
    /// no row at all); only if a row is there, the full insert-or-get, which replaces an
    /// expired row or returns the live one.
    async fn insert_or_get_unseen(&self, req: &InsertRequest) -> Result<InsertOutcome, StoreError> {
        let absent = req.clone();
        let inserted = self
            .write_one(Admission::Refuse, Access::Write, move |c| {
                ops::insert_absent(c, &absent)
            })
            .await?;
        if let Some(lease) = inserted {
            return Ok(InsertOutcome::Inserted(lease));
        }
        let req = req.clone();
        self.write(Admission::Refuse, Access::Compound, move |c| {
            ops::insert_or_get(c, &req)
        })
        .await
    }

    async fn take_over(
        &self,
        seen: &IdempotencyRecord,
        token: LeaseToken,
        lease_ttl: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        let seen = seen.clone();
        self.write_one(Admission::Refuse, Access::Write, move |c| {
            ops::take_over(c, &seen, token, lease_ttl)
        })
        .await
    }

    async fn renew(&self, lease: &Lease, lease_ttl: Duration) -> Result<UnixMillis, StoreError> {
        self.held(lease, move |c, l| ops::renew(c, l, lease_ttl))
            .await
    }

    async fn complete(&self, lease: &Lease, response: &StoredResponse) -> Result<(), StoreError> {
        let completion = Completion::new(lease, response);
        self.held(lease, move |c, l| ops::complete(c, l, &completion))
            .await
    }

    async fn fail(&self, lease: &Lease) -> Result<(), StoreError> {
        self.held(lease, ops::fail).await
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.held(lease, ops::release).await
    }

    async fn get(&self, key: &ScopedKey) -> Result<Option<IdempotencyRecord>, StoreError> {
        let key = key.clone();
        self.read(move |c| read_live(c, &key, now_millis())).await
    }

    async fn purge_expired(&self, batch: NonZeroU32) -> Result<u64, StoreError> {
        self.write(Admission::Wait, Access::Write, move |c| {
            ops::purge(c, batch.get())
        })
        .await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.write_one(Admission::Wait, Access::Read, ops::ping)
            .await
    }

    fn backend(&self) -> &'static str {
        "sqlite"
    }
}
