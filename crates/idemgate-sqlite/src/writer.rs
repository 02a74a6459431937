//! [`Writer`]: the read-write connection, shared by the store thread and by callers that
//! find it idle.
//!
//! Handing a lone write to the store thread costs two wake-ups (the thread, then the waiting
//! task): at one connection on a 2-core VM a fresh key's two writes took 0.12 ms longer that
//! way, more than the writes themselves in WAL mode with `synchronous = NORMAL` (no `fsync`
//! per commit). So a single-statement write that is the only one in progress and finds the
//! connection free runs on the caller's thread, exactly as the store thread would run a batch of one: the files checked before
//! and after, autocommit, and no waiting for a lock (a busy timeout of zero); a write that
//! would wait goes to the queue instead, where the store thread waits the configured busy
//! timeout. An autocommit statement that answers `SQLITE_BUSY` changed nothing, so it may run
//! again there (SQLite's `sqlite3_step` documentation). Only a write that began while no
//! other was in progress runs this way: under load, writes keep sharing the store thread's
//! transactions (one commit for many). The first commit after the WAL restarts syncs the
//! WAL's header, wherever it runs: one `fsync` per cycle of the WAL (up to 8192 frames).

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::Thread;
use std::time::Duration;

use rusqlite::Connection;

use crate::checkpoint::{wal_frames, NUDGE_EVERY, WRITER_AUTOCHECKPOINT_PAGES};
use crate::error::{Result, SqliteStoreError};
use crate::file::DbFile;

/// The read-write connection and what every transaction on it does besides its statements.
#[derive(Debug)]
pub(crate) struct Writer {
    /// `None` once the store thread closed it.
    conn: Mutex<Option<Connection>>,
    /// The database files; `None` in memory.
    file: Option<Arc<DbFile>>,
    /// The busy timeout of the store thread's transactions.
    busy_timeout: Duration,
    /// Whether callers may run writes themselves (not when a commit `fsync`s).
    inline: bool,
    /// Transactions since the checkpointer was last nudged.
    since_nudge: AtomicU32,
    /// Frames in the WAL after the last commit: from [`WRITER_AUTOCHECKPOINT_PAGES`] on,
    /// writes go to the store thread, whose commits checkpoint (`fsync`).
    wal_frames: AtomicU32,
    /// The checkpointer's thread, woken every [`NUDGE_EVERY`] transactions.
    checkpointer: Option<Thread>,
    /// Writes in progress: queued, on the store thread, or on a caller's thread.
    writes: AtomicUsize,
}

/// A write in progress ([`Writer::enter`]), until dropped.
pub(crate) struct Writing<'a> {
    writes: &'a AtomicUsize,
    alone: bool,
}

impl Writing<'_> {
    /// No other write was in progress when this one began.
    pub(crate) fn alone(&self) -> bool {
        self.alone
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.writes.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Writer {
    pub(crate) fn new(
        conn: Connection,
        file: Option<Arc<DbFile>>,
        busy_timeout: Duration,
        inline: bool,
        checkpointer: Option<Thread>,
    ) -> Self {
        Self {
            conn: Mutex::new(Some(conn)),
            file,
            busy_timeout,
            inline,
            since_nudge: AtomicU32::new(0),
            wal_frames: AtomicU32::new(0),
            checkpointer,
            writes: AtomicUsize::new(0),
        }
    }

    /// Counts a write in progress until the guard is dropped.
    pub(crate) fn enter(&self) -> Writing<'_> {
        let before = self.writes.fetch_add(1, Ordering::Relaxed);
        Writing {
            writes: &self.writes,
            alone: before == 0,
        }
    }

    /// The database files; `None` in memory.
    pub(crate) fn file(&self) -> Option<&Arc<DbFile>> {
        self.file.as_ref()
    }

    /// Waits for the connection (`None` inside once closed).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Option<Connection>> {
        // A panic while holding the lock leaves the connection usable: SQLite rolls back
        // a statement that did not finish.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a finished transaction on this thread, nudging the checkpointer every
    /// [`NUDGE_EVERY`], and notes the WAL's length after it.
    pub(crate) fn committed(&self) {
        if let Some(frames) = wal_frames() {
            self.wal_frames.store(frames, Ordering::Relaxed);
        }
        if self.since_nudge.fetch_add(1, Ordering::Relaxed) + 1 >= NUDGE_EVERY {
            self.since_nudge.store(0, Ordering::Relaxed);
            if let Some(thread) = &self.checkpointer {
                thread.unpark();
            }
        }
    }

    /// Runs the single-statement `op` on this thread when the connection is free and the
    /// write need not wait; `None` (nothing written) when it must go to the queue: the
    /// connection is busy or closed, another process holds the write lock, or a commit
    /// would `fsync` (`synchronous = FULL`, or a WAL due for the store thread's checkpoint). The caller checks that the queue is empty.
    ///
    /// Answers as the store thread would: [`SqliteStoreError::FileGone`] when a database file
    /// changed before the write, [`SqliteStoreError::FileChangedAtCommit`] during it, else
    /// `op`'s result.
    pub(crate) fn try_inline<T>(
        &self,
        op: &impl Fn(&Connection) -> Result<T>,
    ) -> Option<Result<T>> {
        if !self.inline || self.wal_frames.load(Ordering::Relaxed) >= WRITER_AUTOCHECKPOINT_PAGES {
            return None;
        }
        let guard = match self.conn.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        // An open transaction (a failed COMMIT whose ROLLBACK failed too) would swallow
        // the write: the store thread deals with it.
        let conn = guard.as_ref().filter(|c| c.is_autocommit())?;
        if let Some(Err(e)) = self.file.as_ref().map(|f| f.check()) {
            return Some(Err(e));
        }
        let result = match conn.busy_timeout(Duration::ZERO) {
            Ok(()) => op(conn),
            Err(e) => Err(e.into()),
        };
        // The store thread's transactions wait again; failing to set it is not possible
        // for an open connection (sqlite3_busy_timeout only fails on a misuse).
        let _ = conn.busy_timeout(self.busy_timeout);
        if matches!(&result, Err(e) if e.is_busy()) {
            return None;
        }
        drop(guard);
        self.committed();
        if let Some(path) = self.file.as_ref().and_then(|f| f.gone()) {
            // What was just committed may be lost with the changed file, or come back with
            // it: its outcome is unknown, as for a batch.
            return Some(Err(SqliteStoreError::FileChangedAtCommit { path }));
        }
        Some(result)
    }
}

#[cfg(test)]
mod tests;
