//! The read path: a small pool of read-only connections, used on the blocking thread pool.
//!
//! In WAL mode a reader never waits for the writer nor for another process holding the
//! write lock, so a replay or a `409` found here does not queue behind writes. At most
//! [`crate::SqliteOptions::readers`] reads run at once; connections are opened on first use
//! and kept.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::Semaphore;

use crate::error::{Result, SqliteStoreError};
use crate::file::DbFile;
use crate::schema;

/// The read-only connections of a file-backed store.
#[derive(Debug)]
pub(crate) struct Readers {
    file: Arc<DbFile>,
    busy_timeout: Duration,
    idle: Mutex<Vec<Connection>>,
    permits: Arc<Semaphore>,
    max: u32,
}

impl Readers {
    /// A pool of at most `max` connections to `file` (none opened yet).
    pub(crate) fn new(file: Arc<DbFile>, busy_timeout: Duration, max: usize) -> Self {
        let max = u32::try_from(max.clamp(1, Semaphore::MAX_PERMITS)).unwrap_or(u32::MAX);
        Self {
            file,
            busy_timeout,
            idle: Mutex::new(Vec::with_capacity(max as usize)),
            permits: Arc::new(Semaphore::new(max as usize)),
            max,
        }
    }

    /// Runs `op` on a read-only connection: on the calling thread when an idle connection is
    /// at hand and the read need not wait, else on the blocking thread pool.
    ///
    /// A reader in WAL mode waits only in rare moments (recovery of the log after a crash, a
    /// checkpoint restarting it); on the calling thread it does not wait at all (a busy
    /// timeout of zero) and falls back to the pool instead. A point read of a cached page
    /// takes microseconds, less than handing it to another thread and back.
    ///
    /// # Errors
    /// [`SqliteStoreError::FileGone`] if the database file changed, an error opening a
    /// connection, `op`'s error, or [`SqliteStoreError::Closed`] once the pool is closed.
    pub(crate) async fn run<T, F>(self: &Arc<Self>, op: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> Result<T> + Send + 'static,
    {
        if let Some(done) = self.try_inline(&op) {
            return done;
        }
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| SqliteStoreError::Closed)?;
        let this = Arc::clone(self);
        let task = tokio::task::spawn_blocking(move || {
            let result = this.with_connection(op);
            drop(permit);
            result
        });
        task.await.map_err(SqliteStoreError::Reader)?
    }

    /// `op` on an idle connection on this thread, or `None` when that would mean waiting:
    /// no idle connection or permit, or a busy database.
    fn try_inline<T>(&self, op: &impl Fn(&Connection) -> Result<T>) -> Option<Result<T>> {
        let _permit = self.permits.try_acquire().ok()?;
        if let Err(e) = self.file.check() {
            return Some(Err(e));
        }
        let conn = self.idle().pop()?;
        let result = match conn.busy_timeout(Duration::ZERO) {
            Ok(()) => op(&conn),
            Err(e) => Err(e.into()),
        };
        let restored = conn.busy_timeout(self.busy_timeout).is_ok();
        if restored {
            self.idle().push(conn);
        }
        match result {
            Err(e) if e.is_busy() => None,
            done => Some(done),
        }
    }

    fn with_connection<T>(&self, op: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.file.check()?;
        let pooled = self.idle().pop();
        let conn = match pooled {
            Some(conn) => conn,
            None => schema::open_reader(self.file.path(), self.busy_timeout)?,
        };
        let result = op(&conn);
        self.idle().push(conn);
        result
    }

    fn idle(&self) -> MutexGuard<'_, Vec<Connection>> {
        // A panic while holding the lock leaves a valid Vec of connections.
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for the reads in flight, then closes every connection; later reads fail with
    /// [`SqliteStoreError::Closed`].
    pub(crate) async fn close(&self) {
        if let Ok(all) = self.permits.acquire_many(self.max).await {
            self.permits.close();
            drop(all);
        }
        let idle = std::mem::take(&mut *self.idle());
        for conn in idle {
            self.file.close(conn);
        }
    }
}
