//! The store thread: it owns the read-write connection, takes commands from a bounded
//! queue, and runs whatever is queued (up to `max_batch` commands) in one transaction,
//! replying to each command only once that transaction committed.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use idemgate_core::StoreError;
use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use crate::checkpoint::{checkpoint_on_this_thread, Checkpointer};
use crate::error::{Result, SqliteStoreError};
use crate::writer::Writer;

/// Where a command's answer goes.
pub(crate) type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

/// How a command uses the database.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Access {
    /// One statement that only reads.
    Read,
    /// One statement that may write (a grouped transaction takes the write lock up front).
    Write,
    /// More than one statement that may write: it needs a transaction even alone.
    Compound,
}

/// Runs the operation on the connection (`None`: it never ran) and keeps its result.
type Job = Box<dyn FnOnce(Option<&Connection>) -> Ran + Send>;

/// One store operation and where to send its answer.
pub(crate) struct Command {
    access: Access,
    job: Job,
}

impl fmt::Debug for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Command")
            .field("access", &self.access)
            .finish_non_exhaustive()
    }
}

/// Sends a command's result, or the reason it is void.
type Deliver = Box<dyn FnOnce(Option<&Void<'_>>) + Send>;

/// A command that ran, holding its result until the transaction's fate is known.
struct Ran {
    /// The operation failed (a stale lease is a result, not a failure).
    failed: bool,
    deliver: Deliver,
}

impl Command {
    /// A command running `op` and answering on `reply`.
    pub(crate) fn new<T, F>(access: Access, op: F, reply: Reply<T>) -> Self
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let job: Job = Box::new(move |conn| {
            let result = conn.map(op);
            Ran {
                failed: !matches!(result, Some(Ok(_))),
                deliver: Box::new(move |void| {
                    let result = match (void, result) {
                        (Some(void), _) => Err(void.error()),
                        (None, Some(result)) => result,
                        (None, None) => Err(SqliteStoreError::Closed),
                    };
                    // The caller may have given up waiting; nothing to do then.
                    let _ = reply.send(result.map_err(Into::into));
                }),
            }
        });
        Self { access, job }
    }

    fn run(self, conn: &Connection) -> Ran {
        (self.job)(Some(conn))
    }

    /// Fails a command that never ran.
    fn refuse(self, void: &Void<'_>) {
        ((self.job)(None).deliver)(Some(void));
    }
}

/// Why a whole batch's results are void.
enum Void<'a> {
    /// The connection was closed.
    Closed,
    /// BEGIN or COMMIT failed.
    Transaction(&'a Arc<rusqlite::Error>),
    /// Another command's error made SQLite roll the transaction back.
    Aborted,
    /// A database file was deleted, replaced or truncated (this one) before the batch.
    FileGone(PathBuf),
    /// ... while the batch ran: it committed, into a file that may be lost or come back.
    ChangedAtCommit(PathBuf),
}

impl Void<'_> {
    fn error(&self) -> SqliteStoreError {
        match self {
            Self::Closed => SqliteStoreError::Closed,
            Self::Transaction(e) => SqliteStoreError::Transaction(Arc::clone(e)),
            Self::Aborted => SqliteStoreError::Aborted,
            Self::FileGone(path) => SqliteStoreError::FileGone { path: path.clone() },
            Self::ChangedAtCommit(path) => {
                SqliteStoreError::FileChangedAtCommit { path: path.clone() }
            }
        }
    }
}

/// The store thread's state. Its buffers are reused from one batch to the next.
pub(crate) struct Worker {
    writer: Arc<Writer>,
    /// Dropped (stopped) before the connection closes.
    checkpointer: Option<Checkpointer>,
    max_batch: usize,
    batch: Vec<Command>,
    done: Vec<Ran>,
}

impl Worker {
    pub(crate) fn new(
        writer: Arc<Writer>,
        checkpointer: Option<Checkpointer>,
        max_batch: usize,
    ) -> Self {
        Self {
            writer,
            checkpointer,
            max_batch: max_batch.max(1),
            batch: Vec::with_capacity(max_batch.max(1)),
            done: Vec::with_capacity(max_batch.max(1)),
        }
    }

    /// Serves commands until every sender is gone, then closes the connection and signals
    /// `exited`.
    pub(crate) fn run(mut self, mut rx: mpsc::Receiver<Command>, exited: oneshot::Sender<()>) {
        let writer = Arc::clone(&self.writer);
        checkpoint_on_this_thread();
        while let Some(first) = rx.blocking_recv() {
            self.batch.push(first);
            while self.batch.len() < self.max_batch {
                let Ok(cmd) = rx.try_recv() else { break };
                self.batch.push(cmd);
            }
            let conn = writer.lock();
            match conn.as_ref() {
                Some(conn) => self.run_batch(conn),
                None => self
                    .batch
                    .drain(..)
                    .for_each(|cmd| cmd.refuse(&Void::Closed)),
            }
            drop(conn);
            writer.committed();
        }
        // Stop the checkpointer first, so closing the last connection checkpoints.
        drop(self.checkpointer.take());
        // Closing flushes the statement cache; in WAL mode the last connection to close
        // checkpoints and removes the -wal file: only while the files are in order.
        if let Some(conn) = writer.lock().take() {
            match writer.file() {
                Some(file) => file.close(conn),
                None => {
                    let _ = conn.close();
                }
            }
        }
        let _ = exited.send(());
    }

    fn run_batch(&mut self, conn: &Connection) {
        if let Some(void) = self.gone() {
            self.batch.drain(..).for_each(|cmd| cmd.refuse(&void));
            return;
        }
        // A lone single-statement command runs in autocommit mode: same atomicity, no
        // BEGIN/COMMIT round.
        if self.batch.len() == 1 && self.batch[0].access != Access::Compound {
            if let Some(cmd) = self.batch.pop() {
                let ran = cmd.run(conn);
                (ran.deliver)(self.changed_at_commit().as_ref());
            }
            return;
        }
        // Take the write lock up front when anything may write, so no command meets a
        // lock upgrade failure half-way (SQLITE_BUSY_SNAPSHOT is not retried by busy_timeout).
        let begin = if self.batch.iter().any(|c| c.access != Access::Read) {
            "BEGIN IMMEDIATE"
        } else {
            "BEGIN"
        };
        if let Err(e) = exec(conn, begin) {
            let e = Arc::new(e);
            let void = Void::Transaction(&e);
            self.batch.drain(..).for_each(|cmd| cmd.refuse(&void));
            return;
        }
        if self.run_in_transaction(conn) {
            self.finish(conn);
        }
    }

    /// Runs the batch inside the open transaction; false (every result sent) if SQLite
    /// rolled it back.
    fn run_in_transaction(&mut self, conn: &Connection) -> bool {
        let mut aborted = false;
        for cmd in self.batch.drain(..) {
            if aborted {
                cmd.refuse(&Void::Aborted);
                continue;
            }
            let ran = cmd.run(conn);
            // A failed statement is undone by SQLite, and the transaction goes on, unless
            // SQLite had to roll the whole transaction back (I/O error, full disk, ...).
            if ran.failed && conn.is_autocommit() {
                aborted = true;
                (ran.deliver)(None);
            } else {
                self.done.push(ran);
            }
        }
        if aborted {
            for ran in self.done.drain(..) {
                (ran.deliver)(Some(&Void::Aborted));
            }
        }
        !aborted
    }

    /// Commits, then sends every result (or the commit's error).
    fn finish(&mut self, conn: &Connection) {
        match exec(conn, "COMMIT") {
            Ok(()) => {
                // A file that changed during the batch may hold what was just committed
                // (deleted: lost at the next restart; renamed back: kept): nothing is
                // reported as recorded, nor as refused.
                let gone = self.changed_at_commit();
                for ran in self.done.drain(..) {
                    (ran.deliver)(gone.as_ref());
                }
            }
            Err(e) => {
                // A failed COMMIT may leave the transaction open (e.g. SQLITE_BUSY).
                if !conn.is_autocommit() {
                    let _ = exec(conn, "ROLLBACK");
                }
                let e = Arc::new(e);
                for ran in self.done.drain(..) {
                    (ran.deliver)(Some(&Void::Transaction(&e)));
                }
            }
        }
    }

    /// Why every command must be refused, if a database file changed.
    fn gone(&self) -> Option<Void<'static>> {
        self.writer.file()?.gone().map(Void::FileGone)
    }

    /// Why every result of a batch that ran is void, if a database file changed meanwhile.
    fn changed_at_commit(&self) -> Option<Void<'static>> {
        self.writer.file()?.gone().map(Void::ChangedAtCommit)
    }
}

fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}
