//! The store thread: it owns the connection, takes commands from a bounded queue, and runs
//! whatever is queued (up to `max_batch` commands) in one transaction, replying to each
//! command only once that transaction committed.

use std::sync::Arc;
use std::time::Duration;

use idemgate_core::{
    AcquireOutcome, AcquireRequest, IdempotencyRecord, Lease, ScopedKey, StoreError, UnixMillis,
};
use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use crate::checkpoint::{Checkpointer, NUDGE_EVERY};
use crate::error::{Result, SqliteStoreError};
use crate::ops::{self, Completion};
use crate::SqliteStats;

/// Where a command's answer goes.
pub(crate) type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

/// One store operation and where to send its answer.
#[derive(Debug)]
pub(crate) enum Command {
    Acquire(AcquireRequest, Reply<AcquireOutcome>),
    Renew(Lease, Duration, Reply<UnixMillis>),
    Complete(Lease, Completion, Reply<()>),
    Fail(Lease, Reply<()>),
    Release(Lease, Reply<()>),
    Get(ScopedKey, Reply<Option<IdempotencyRecord>>),
    Purge(u32, Reply<u64>),
    Ping(Reply<()>),
    Stats(Reply<SqliteStats>),
}

impl Command {
    /// True if the command may write (its transaction must take the write lock up front).
    fn writes(&self) -> bool {
        !matches!(self, Self::Get(..) | Self::Ping(..) | Self::Stats(..))
    }

    /// True if the command runs more than one statement (it needs a transaction even alone).
    fn compound(&self) -> bool {
        matches!(self, Self::Acquire(..))
    }
}

/// A command that ran, holding its result until the transaction's fate is known.
enum Done {
    Acquire(Reply<AcquireOutcome>, Result<AcquireOutcome>),
    Renew(Reply<UnixMillis>, Result<Option<UnixMillis>>),
    Held(Reply<()>, Result<bool>),
    Record(
        Reply<Option<IdempotencyRecord>>,
        Result<Option<IdempotencyRecord>>,
    ),
    Count(Reply<u64>, Result<u64>),
    Unit(Reply<()>, Result<()>),
    Stats(Reply<SqliteStats>, Result<SqliteStats>),
}

/// Why a whole transaction's results are void.
enum Void<'a> {
    /// BEGIN or COMMIT failed.
    Transaction(&'a Arc<rusqlite::Error>),
    /// Another command's error made SQLite roll the transaction back.
    Aborted,
}

impl Void<'_> {
    fn error(&self) -> SqliteStoreError {
        match self {
            Self::Transaction(e) => SqliteStoreError::Transaction(Arc::clone(e)),
            Self::Aborted => SqliteStoreError::Aborted,
        }
    }
}

impl Done {
    /// True if the command failed with an error (a stale lease is not an error here).
    fn is_err(&self) -> bool {
        match self {
            Self::Acquire(_, r) => r.is_err(),
            Self::Renew(_, r) => r.is_err(),
            Self::Held(_, r) => r.is_err(),
            Self::Record(_, r) => r.is_err(),
            Self::Count(_, r) => r.is_err(),
            Self::Unit(_, r) => r.is_err(),
            Self::Stats(_, r) => r.is_err(),
        }
    }

    /// Sends the result, or the reason it is void.
    fn send(self, void: Option<&Void<'_>>) {
        fn deliver<T>(tx: Reply<T>, r: Result<T, StoreError>, void: Option<&Void<'_>>) {
            let r = match void {
                Some(v) => Err(v.error().into()),
                None => r,
            };
            // The caller may have given up waiting; nothing to do then.
            let _ = tx.send(r);
        }
        fn held(changed: bool) -> Result<(), StoreError> {
            changed.then_some(()).ok_or(StoreError::LeaseLost)
        }
        match self {
            Self::Acquire(tx, r) => deliver(tx, r.map_err(Into::into), void),
            Self::Renew(tx, r) => deliver(
                tx,
                r.map_err(Into::into)
                    .and_then(|u| u.ok_or(StoreError::LeaseLost)),
                void,
            ),
            Self::Held(tx, r) => deliver(tx, r.map_err(Into::into).and_then(held), void),
            Self::Record(tx, r) => deliver(tx, r.map_err(Into::into), void),
            Self::Count(tx, r) => deliver(tx, r.map_err(Into::into), void),
            Self::Unit(tx, r) => deliver(tx, r.map_err(Into::into), void),
            Self::Stats(tx, r) => deliver(tx, r.map_err(Into::into), void),
        }
    }
}

/// Runs one command on `conn`.
fn execute(conn: &Connection, cmd: Command) -> Done {
    match cmd {
        Command::Acquire(req, tx) => Done::Acquire(tx, ops::acquire(conn, &req)),
        Command::Renew(lease, ttl, tx) => Done::Renew(tx, ops::renew(conn, &lease, ttl)),
        Command::Complete(lease, c, tx) => Done::Held(tx, ops::complete(conn, &lease, &c)),
        Command::Fail(lease, tx) => Done::Held(tx, ops::fail(conn, &lease)),
        Command::Release(lease, tx) => Done::Held(tx, ops::release(conn, &lease)),
        Command::Get(key, tx) => Done::Record(tx, ops::get(conn, &key)),
        Command::Purge(batch, tx) => Done::Count(tx, ops::purge(conn, batch)),
        Command::Ping(tx) => Done::Unit(tx, ops::ping(conn)),
        Command::Stats(tx) => Done::Stats(tx, ops::stats(conn)),
    }
}

/// Fails a command that never ran.
fn refuse(cmd: Command, void: &Void<'_>) {
    fn deliver<T>(tx: Reply<T>, void: &Void<'_>) {
        let _ = tx.send(Err(void.error().into()));
    }
    match cmd {
        Command::Acquire(_, tx) => deliver(tx, void),
        Command::Renew(_, _, tx) => deliver(tx, void),
        Command::Complete(_, _, tx) | Command::Fail(_, tx) | Command::Release(_, tx) => {
            deliver(tx, void)
        }
        Command::Get(_, tx) => deliver(tx, void),
        Command::Purge(_, tx) => deliver(tx, void),
        Command::Ping(tx) => deliver(tx, void),
        Command::Stats(tx) => deliver(tx, void),
    }
}

/// The store thread's state. Its buffers are reused from one batch to the next.
pub(crate) struct Worker {
    conn: Connection,
    checkpointer: Option<Checkpointer>,
    /// Batches run since the checkpointer was last nudged.
    since_nudge: u32,
    max_batch: usize,
    batch: Vec<Command>,
    done: Vec<Done>,
}

impl Worker {
    pub(crate) fn new(
        conn: Connection,
        checkpointer: Option<Checkpointer>,
        max_batch: usize,
    ) -> Self {
        Self {
            conn,
            checkpointer,
            since_nudge: 0,
            max_batch: max_batch.max(1),
            batch: Vec::with_capacity(max_batch.max(1)),
            done: Vec::with_capacity(max_batch.max(1)),
        }
    }

    /// Serves commands until every sender is gone, then closes the connection and signals
    /// `exited`.
    pub(crate) fn run(mut self, mut rx: mpsc::Receiver<Command>, exited: oneshot::Sender<()>) {
        while let Some(first) = rx.blocking_recv() {
            self.batch.push(first);
            while self.batch.len() < self.max_batch {
                match rx.try_recv() {
                    Ok(cmd) => self.batch.push(cmd),
                    Err(_) => break,
                }
            }
            self.run_batch();
            self.since_nudge += 1;
            if self.since_nudge >= NUDGE_EVERY {
                self.since_nudge = 0;
                if let Some(c) = &self.checkpointer {
                    c.nudge();
                }
            }
        }
        // Stop the checkpointer first, so closing the last connection checkpoints.
        drop(self.checkpointer.take());
        // Closing flushes the statement cache; in WAL mode the last connection to close
        // checkpoints and removes the -wal file. An error here has no one to report to.
        let _ = self.conn.close();
        let _ = exited.send(());
    }

    fn run_batch(&mut self) {
        // A lone single-statement command runs in autocommit mode: same atomicity, no
        // BEGIN/COMMIT round.
        if self.batch.len() == 1 && !self.batch[0].compound() {
            if let Some(cmd) = self.batch.pop() {
                execute(&self.conn, cmd).send(None);
            }
            return;
        }
        // Take the write lock up front when anything may write, so no command meets a
        // lock upgrade failure half-way (SQLITE_BUSY_SNAPSHOT is not retried by busy_timeout).
        let begin = if self.batch.iter().any(Command::writes) {
            "BEGIN IMMEDIATE"
        } else {
            "BEGIN"
        };
        if let Err(e) = self.exec(begin) {
            let e = Arc::new(e);
            for cmd in self.batch.drain(..) {
                refuse(cmd, &Void::Transaction(&e));
            }
            return;
        }
        let mut aborted = false;
        for cmd in self.batch.drain(..) {
            if aborted {
                refuse(cmd, &Void::Aborted);
                continue;
            }
            let done = execute(&self.conn, cmd);
            // A failed statement is undone by SQLite, and the transaction goes on, unless
            // SQLite had to roll the whole transaction back (I/O error, full disk, ...).
            if done.is_err() && self.conn.is_autocommit() {
                aborted = true;
                done.send(None);
            } else {
                self.done.push(done);
            }
        }
        if aborted {
            for done in self.done.drain(..) {
                done.send(Some(&Void::Aborted));
            }
            return;
        }
        match self.exec("COMMIT") {
            Ok(()) => {
                for done in self.done.drain(..) {
                    done.send(None);
                }
            }
            Err(e) => {
                // A failed COMMIT may leave the transaction open (e.g. SQLITE_BUSY).
                if !self.conn.is_autocommit() {
                    let _ = self.exec("ROLLBACK");
                }
                let e = Arc::new(e);
                for done in self.done.drain(..) {
                    done.send(Some(&Void::Transaction(&e)));
                }
            }
        }
    }

    fn exec(&self, sql: &str) -> rusqlite::Result<()> {
        self.conn.prepare_cached(sql)?.execute([])?;
        Ok(())
    }
}
