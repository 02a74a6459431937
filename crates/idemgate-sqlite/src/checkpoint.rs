//! The WAL checkpointer: a second thread with its own connection that copies the WAL back
//! into the database file, so the store thread does not pay for it.
//!
//! A checkpoint writes every page changed since the last one into the database file and
//! `fsync`s it: with random idempotency keys, that is most of the cost of a write (about
//! 100 ms per 1000 pages measured), and SQLite's automatic checkpoint runs it on the
//! committing connection. Here a `PASSIVE` checkpoint (it never waits for, nor blocks, the
//! writer) runs every [`INTERVAL`], or sooner after [`NUDGE_EVERY`] commits. The store thread
//! keeps a high automatic checkpoint ([`WRITER_AUTOCHECKPOINT_PAGES`], [`on_commit`]) as a
//! safety net: under sustained load the WAL only restarts from its beginning after a
//! checkpoint that caught up with every commit, which the writer's own (then small)
//! checkpoint guarantees. A write run on a caller's thread (`writer.rs`) never checkpoints:
//! once the WAL holds that many frames, writes go to the store thread again.

use std::cell::Cell;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use rusqlite::hooks::Wal;
use rusqlite::Connection;

use crate::error::{Result, SqliteStoreError};
use crate::file::DbFile;

/// Longest pause between two checkpoints.
const INTERVAL: Duration = Duration::from_millis(200);

/// The writer wakes the checkpointer after this many transactions.
pub(crate) const NUDGE_EVERY: u32 = 128;

/// The writer's own automatic checkpoint threshold, in WAL pages (32 MiB of 4 KiB pages).
pub(crate) const WRITER_AUTOCHECKPOINT_PAGES: u32 = 8192;

thread_local! {
    /// Frames in the WAL after this thread's last commit (`None`: no commit since taken).
    static WAL_FRAMES: Cell<Option<u32>> = const { Cell::new(None) };
    /// This thread runs the safety-net checkpoint: the store thread.
    static CHECKPOINTS: Cell<bool> = const { Cell::new(false) };
}

/// The writer's WAL hook (`sqlite3_wal_hook`, in place of `wal_autocheckpoint`, which
/// installs SQLite's own): notes the frames in the WAL for [`wal_frames`] and, on the store
/// thread only, runs a `PASSIVE` checkpoint once they reach [`WRITER_AUTOCHECKPOINT_PAGES`],
/// as SQLite's automatic checkpoint would. Always answers `Ok`: an error here would make the
/// statement report failure although its commit happened.
pub(crate) fn on_commit(wal: &Wal, frames: c_int) -> rusqlite::Result<()> {
    let frames = u32::try_from(frames).unwrap_or(0);
    WAL_FRAMES.set(Some(frames));
    if frames >= WRITER_AUTOCHECKPOINT_PAGES && CHECKPOINTS.get() {
        // A busy or failed checkpoint is retried at the next commit, as SQLite's is.
        let _ = wal.checkpoint();
    }
    Ok(())
}

/// Makes this thread run the safety-net checkpoint (call it on the store thread).
pub(crate) fn checkpoint_on_this_thread() {
    CHECKPOINTS.set(true);
}

/// Frames in the WAL after this thread's last commit since the previous call, if any.
pub(crate) fn wal_frames() -> Option<u32> {
    WAL_FRAMES.take()
}

/// A running checkpointer thread; dropping it stops the thread and waits for it (at most
/// one checkpoint).
#[derive(Debug)]
pub(crate) struct Checkpointer {
    thread: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl Checkpointer {
    /// Opens a connection to `file` and starts the thread. It checkpoints only while the
    /// database files are in order ([`DbFile::check`]).
    pub(crate) fn spawn(file: Arc<DbFile>) -> Result<Self> {
        let conn = Connection::open(file.path())?;
        // PASSIVE checkpoints never wait; a busy lock just skips a round.
        conn.busy_timeout(Duration::ZERO)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = thread::Builder::new()
            .name("idemgate-sqlite-checkpoint".into())
            .spawn(move || run(conn, &file, &stopped))
            .map_err(SqliteStoreError::Spawn)?;
        Ok(Self {
            thread: Some(thread),
            stop,
        })
    }

    /// The checkpointer's thread: unparking it asks for a checkpoint soon.
    pub(crate) fn thread(&self) -> Option<std::thread::Thread> {
        self.thread.as_ref().map(|t| t.thread().clone())
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

fn run(conn: Connection, file: &DbFile, stop: &AtomicBool) {
    while !stop.load(Ordering::Acquire) {
        // Errors (a busy lock, an I/O error) skip a round; the writer's automatic
        // checkpoint still bounds the WAL. A changed file is not touched (a truncated
        // -shm faults).
        if file.gone().is_none() {
            let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        }
        thread::park_timeout(INTERVAL);
    }
    file.close(conn);
}
