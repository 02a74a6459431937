//! The WAL checkpointer: a second thread with its own connection that copies the WAL back
//! into the database file, so the store thread does not pay for it.
//!
//! A checkpoint writes every page changed since the last one into the database file and
//! `fsync`s it: with random idempotency keys, that is most of the cost of a write (about
//! 100 ms per 1000 pages measured), and SQLite's automatic checkpoint runs it on the
//! committing connection. Here a `PASSIVE` checkpoint (it never waits for, nor blocks, the
//! writer) runs every [`INTERVAL`], or sooner after [`NUDGE_EVERY`] commits. The writer keeps
//! a high `wal_autocheckpoint` ([`WRITER_AUTOCHECKPOINT_PAGES`]) as a safety net: under
//! sustained load the WAL only restarts from its beginning after a checkpoint that caught
//! up with every commit, which the writer's own (then small) checkpoint guarantees.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use rusqlite::Connection;

use crate::error::{Result, SqliteStoreError};
use crate::file::DbFile;

/// Longest pause between two checkpoints.
const INTERVAL: Duration = Duration::from_millis(200);

/// The writer wakes the checkpointer after this many transactions.
pub(crate) const NUDGE_EVERY: u32 = 128;

/// The writer's own automatic checkpoint threshold, in WAL pages (32 MiB of 4 KiB pages).
pub(crate) const WRITER_AUTOCHECKPOINT_PAGES: u32 = 8192;

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

    /// Asks for a checkpoint soon.
    pub(crate) fn nudge(&self) {
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
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
