//! [`Writer`]: the thread that owns the journal file and commits its writes in groups, so
//! concurrent acquires share one fsync instead of queueing for one each.

use std::sync::mpsc;

use idemgate_core::StoreError;
use tokio::sync::oneshot;

use super::file::JournalFile;

/// The most operations committed in one transaction.
const MAX_GROUP: usize = 256;

/// Tells an operation's caller its result once the group's commit is known.
type Finish = Box<dyn FnOnce(Result<(), &rusqlite::Error>) + Send>;

/// One operation on the file, run on the writer's thread inside a group's transaction.
type Op = Box<dyn FnOnce(&mut JournalFile) -> Finish + Send>;

/// The handle of the writer's thread; the thread ends (closing the file and releasing its
/// lock) when the last handle is dropped.
pub(crate) struct Writer {
    ops: mpsc::Sender<Op>,
}

impl Writer {
    /// Starts the thread that owns `file`.
    ///
    /// # Errors
    /// The thread cannot be spawned.
    pub(crate) fn start(file: JournalFile) -> std::io::Result<Self> {
        let (ops, queue) = mpsc::channel::<Op>();
        std::thread::Builder::new()
            .name("idemgate-journal".into())
            .spawn(move || run(file, queue))?;
        Ok(Self { ops })
    }

    /// Runs `f` on the file and answers once the transaction it ran in is committed (an
    /// entry is on disk before its caller goes on).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when `f` or the commit failed, or the thread is gone.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut JournalFile) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        let op: Op = Box::new(move |file| {
            let result = f(file);
            Box::new(move |committed| {
                let answer = match (committed, result) {
                    (Ok(()), Ok(value)) => Ok(value),
                    (Ok(()), Err(e)) => Err(unavailable(e.to_string())),
                    (Err(e), _) => Err(unavailable(format!("commit: {e}"))),
                };
                let _ = tx.send(answer);
            })
        });
        let gone = || unavailable("the journal's writer thread is gone".into());
        self.ops.send(op).map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }
}

impl Writer {
    /// Queues `f` without waiting for its commit (it lands with the next group); a failure
    /// is logged as `what`.
    pub(crate) fn queue(
        &self,
        what: &'static str,
        f: impl FnOnce(&mut JournalFile) -> rusqlite::Result<()> + Send + 'static,
    ) {
        let op: Op = Box::new(move |file| {
            let result = f(file);
            Box::new(move |committed| {
                let failed = match (committed, result) {
                    (Ok(()), Ok(())) => return,
                    (Ok(()), Err(e)) => e.to_string(),
                    (Err(e), _) => format!("commit: {e}"),
                };
                tracing::error!(error = %failed, "forward journal: {what} was not journaled");
            })
        });
        if self.ops.send(op).is_err() {
            tracing::error!("forward journal: {what} was not journaled: the writer thread is gone");
        }
    }
}

fn unavailable(reason: String) -> StoreError {
    StoreError::Unavailable(format!("forward journal: {reason}").into())
}

/// The thread: waits for an operation, runs it and every one queued behind it (up to
/// [`MAX_GROUP`]) in one transaction, commits, answers them all.
fn run(mut file: JournalFile, queue: mpsc::Receiver<Op>) {
    while let Ok(first) = queue.recv() {
        let begun = file.begin();
        let mut finish = vec![first(&mut file)];
        while finish.len() < MAX_GROUP {
            match queue.try_recv() {
                Ok(op) => finish.push(op(&mut file)),
                Err(_) => break,
            }
        }
        let committed = begun.and_then(|()| file.commit());
        for f in finish {
            f(committed.as_ref().map(|_| ()));
        }
    }
}
