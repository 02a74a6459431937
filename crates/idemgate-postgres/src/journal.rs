//! The forward journal ([`ForwardJournalOptions`]): what this process acquired, kept in a
//! local file until a standby has it, and written back after a failover that lost it.
//!
//! - `file.rs`: the SQLite file and its entries; `gate.rs`: the refusal of new keys after a
//!   failover; `task.rs`: the task that drops confirmed entries, handles a failover (record
//!   it in the store, restore, open the gate) and its SQL.
//!
//! The store calls [`Journal::inserted`] and [`Journal::taken_over`] before it hands out a
//! lease (so before the key is forwarded), and [`Journal::outcome`] and
//! [`Journal::released`] after an outcome write landed.

mod file;
mod gate;
mod hooks;
mod sql;
mod task;
mod writer;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemgate_core::record::{duration_ms, now_millis};
use idemgate_core::StoredResponse;
use idemgate_core::{IdempotencyRecord, InsertRequest, Lease, RecordState, StoreError};
use tokio::task::AbortHandle;

pub(crate) use self::file::Identity;
use self::file::{Entry, JournalFile};
pub(crate) use self::gate::Gate;
pub(crate) use self::sql::Statements;
pub(crate) use self::task::{grace_left, spawn, Primary};
use self::writer::Writer;
use crate::error::PostgresStoreError;

/// The forward journal of [`crate::PostgresOptions::with_forward_journal`]: it repairs what a
/// failover to an asynchronous standby lost.
///
/// Before a key acquired by this process is handed to the caller (a fresh insert or a
/// take-over), its scope, fingerprint, fence and lease are written to a local SQLite file
/// (`path`, `synchronous = FULL`, locked by this process); its outcome when recorded. An
/// entry is dropped once every streaming standby's `replay_lsn` has passed the WAL insert
/// position read after its outcome was written (read once a second, one statement), and at
/// the latest after `window` (counted in `idempotency_forward_journal_expired_total` and
/// logged).
///
/// When a connection finds the primary on a higher timeline (or the store starts on a
/// timeline higher than the one the file recorded), new keys are refused
/// ([`StoreError::Refused`], existing records are still returned) until `failover_grace`
/// after the first detection by any process, recorded in the store
/// (`<table>_failovers`, by the database clock), and until this process has restored its
/// entries. An entry is restored only where the store holds no live record of the key, or
/// an `in_progress` one with a lower fence, or with the same fence (another token there is
/// an insert made on the new primary while the gates closed, never forwarded), or, for an
/// entry with an outcome, a completed or failed record of a lower fence (a take-over the
/// failover lost: its outcome was answered first, before the one the lower fence's holder
/// wrote after the failover); no fence is ever lowered. An
/// `in_progress` entry of this run gets a live lease (its holder is still running); one from
/// an earlier run is restored with its lease lapsed, so a retry gets `outcome-unknown` and
/// never a second run. While the gate is closed, a retry of a key whose outcome landed after
/// the failover's first detection (less `failover_grace`) is refused as well
/// ([`StoreError::Refused`]), not replayed: another process's restore may still write a
/// take-over's outcome over it.
///
/// What it does not close: a process that dies with the primary restores its entries when
/// it starts again; until then, and after `failover_grace`, retries of those keys at other
/// processes can run them again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardJournalOptions {
    /// The journal file (created if missing). One per process.
    pub path: PathBuf,
    /// The longest an entry is kept unconfirmed. Defaults to 10 minutes.
    pub window: Duration,
    /// How long after a failover's first detection new keys stay refused, so every process
    /// can restore its entries first. Defaults to 10 s.
    pub failover_grace: Duration,
}

impl ForwardJournalOptions {
    /// A journal at `path` with the default window (10 min) and grace (10 s).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            window: Duration::from_secs(600),
            failover_grace: Duration::from_secs(10),
        }
    }
}

/// An open journal: its file, the gate, and what it was opened with.
pub(crate) struct Journal {
    file: Writer,
    pub(crate) gate: Arc<Gate>,
    pub(crate) options: ForwardJournalOptions,
    /// This process's run number: entries of earlier runs are restored with lapsed leases.
    run: i64,
    /// The identity the file held when opened.
    pub(crate) recorded: Identity,
    /// The file's device and inode when opened.
    file_id: Option<(u64, u64)>,
    /// Why the file can no longer be trusted (replaced or removed under the process), once
    /// seen: new keys are refused from then on.
    broken: Mutex<Option<String>>,
}

/// A journal with its task, stopped when the last clone of the store is dropped.
pub(crate) struct JournalLink {
    pub(crate) journal: Arc<Journal>,
    pub(crate) statements: Arc<Mutex<Arc<Statements>>>,
    pub(crate) task: Mutex<Option<AbortHandle>>,
}

impl Drop for JournalLink {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
    }
}

impl Journal {
    /// Opens the file of `options` and locks it.
    ///
    /// # Errors
    /// [`PostgresStoreError::Journal`] naming the file.
    pub(crate) fn open(options: &ForwardJournalOptions) -> Result<Self, PostgresStoreError> {
        let journal_error = |reason: String| PostgresStoreError::Journal { reason };
        let file = JournalFile::open(&options.path).map_err(journal_error)?;
        let recorded = file
            .identity()
            .map_err(|e| journal_error(format!("{}: {e}", options.path.display())))?;
        Ok(Self {
            run: file.run,
            file: Writer::start(file)
                .map_err(|e| journal_error(format!("the writer thread: {e}")))?,
            gate: Arc::new(Gate::new()),
            options: options.clone(),
            recorded,
            file_id: file_id(&options.path),
            broken: Mutex::new(None),
        })
    }

    /// `e`, explained by the identity the file recorded when that is what refused the
    /// server (another database, or a timeline behind the recorded one).
    pub(crate) fn refused_by_record(&self, e: PostgresStoreError) -> PostgresStoreError {
        let (PostgresStoreError::OtherDatabase { .. } | PostgresStoreError::TimelineBehind { .. }) =
            &e
        else {
            return e;
        };
        let (id, timeline) = (self.recorded.system_identifier, self.recorded.timeline);
        PostgresStoreError::Journal {
            reason: format!(
                "{} was written against the database with system identifier {} on timeline {}: \
                 {e}. A former primary brought back read-write, or another database, would run \
                 keys again; if the database was replaced on purpose, move the journal file away",
                self.options.path.display(),
                id.map_or("(unknown)".into(), |id| id.to_string()),
                timeline.map_or("(unknown)".into(), |t| t.to_string()),
            ),
        }
    }

    /// Runs `f` on the file (on its writer thread, in a committed transaction).
    async fn with_file<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut JournalFile) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.file.run(f).await
    }

    /// Journals the lease `req` acquired, before the key is forwarded.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the file cannot be written: the key must not run.
    pub(crate) async fn inserted(
        &self,
        req: &InsertRequest,
        lease: &Lease,
    ) -> Result<(), StoreError> {
        let lease_ms = duration_ms(req.lease_ttl);
        let ttl_ms = duration_ms(req.record_ttl).max(lease_ms);
        let entry = Entry {
            key: lease.key.clone(),
            fence: lease.fence,
            token: lease.token,
            fingerprint: req.fingerprint,
            state: RecordState::InProgress,
            response: None,
            lease_ttl_ms: lease_ms,
            expires_at_ms: lease.expires_at - lease_ms + ttl_ms,
            run: self.run,
        };
        self.put(entry).await
    }

    /// Journals the lease a take-over of `seen` acquired, before the key is forwarded.
    ///
    /// # Errors
    /// As [`Journal::inserted`].
    pub(crate) async fn taken_over(
        &self,
        seen: &IdempotencyRecord,
        lease: &Lease,
        lease_ttl: Duration,
    ) -> Result<(), StoreError> {
        let entry = Entry {
            key: lease.key.clone(),
            fence: lease.fence,
            token: lease.token,
            fingerprint: seen.fingerprint,
            state: RecordState::InProgress,
            response: None,
            lease_ttl_ms: duration_ms(lease_ttl),
            expires_at_ms: seen.expires_at.max(lease.expires_at),
            run: self.run,
        };
        self.put(entry).await
    }

    async fn put(&self, entry: Entry) -> Result<(), StoreError> {
        let written = now_millis();
        self.with_file(move |file| file.put(&entry, written)).await
    }

    /// Journals the outcome written for `lease` (`completed` with `response`, or
    /// `failed`), without waiting for the file's commit: until it lands the entry stays
    /// `in_progress`, which a restore after a crash writes back with a lapsed lease (its
    /// retries get `outcome-unknown`, never a second run). A failure is logged.
    pub(crate) fn outcome(&self, lease: &Lease, response: Option<&StoredResponse>) {
        let (lease, response) = (lease.clone(), response.cloned());
        self.file.queue("an outcome", move |file| {
            file.outcome(&lease, response.as_ref()).map(drop)
        });
    }

    /// Why new keys are refused: the failover grace, or a file that can no longer be
    /// trusted; `None` when they are not.
    pub(crate) fn refusing(&self) -> Option<String> {
        if let Some(broken) = self
            .broken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Some(broken);
        }
        let left = self.gate.closed_for()?;
        Some(format!(
            "the store failed over; new keys are refused for {} ms more, until the forward \
             journals have restored what it lost (failover_grace)",
            left.as_millis()
        ))
    }

    /// Checks that the file at the journal's path is still the one opened (not removed or
    /// replaced under the process: its entries would then be lost at the next start);
    /// when not, new keys are refused from then on and it is logged.
    pub(crate) fn check_file(&self) {
        let now = file_id(&self.options.path);
        if now.is_some() && now == self.file_id {
            return;
        }
        let mut broken = self.broken.lock().unwrap_or_else(|e| e.into_inner());
        if broken.is_none() {
            let reason = format!(
                "forward journal: {} was removed or replaced while the process held it; new \
                 keys are refused until the process restarts (its entries are in the file it \
                 opened, which a restart no longer finds)",
                self.options.path.display()
            );
            tracing::error!("{reason}");
            *broken = Some(reason);
        }
    }

    /// How many entries the file holds.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the file cannot be read.
    pub(crate) async fn len(&self) -> Result<u64, StoreError> {
        self.with_file(|file| file.len()).await
    }

    /// Drops the entry of a released lease (its operation did not run), without waiting
    /// for the file's commit.
    pub(crate) fn released(&self, lease: &Lease) {
        let lease = lease.clone();
        self.file
            .queue("a released key", move |file| file.remove(&lease));
    }
}

/// The device and inode of the file at `path`, if it exists.
fn file_id(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}
