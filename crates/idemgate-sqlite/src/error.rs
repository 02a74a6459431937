//! [`SqliteStoreError`] and its mapping onto [`StoreError`].

use std::sync::Arc;

use idemgate_core::StoreError;
use rusqlite::ffi::ErrorCode;

/// Shorthand for results of this crate.
pub type Result<T, E = SqliteStoreError> = std::result::Result<T, E>;

/// Errors of the SQLite store.
///
/// Converts into [`StoreError`] with the original error kept as its source. SQLite runs in
/// process, so an error is its definite answer (a failed statement or transaction rolls
/// back, a full queue or a deleted file refuses the work before it starts) and becomes
/// [`StoreError::Refused`]: a busy or locked database, a full disk, a full queue, a deleted
/// database file, a rolled-back group. Only an I/O failure (it may have hit the commit), a
/// file that changed while the write committed, and a stopped store thread leave the outcome
/// unknown: [`StoreError::Unavailable`]. A row that
/// fails validation becomes [`StoreError::Corrupt`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqliteStoreError {
    /// An error reported by SQLite or rusqlite.
    #[error("sqlite error")]
    Sqlite(#[from] rusqlite::Error),
    /// The transaction that grouped this command with others could not begin or commit, so
    /// nothing this command wrote was kept (every command of the group gets this error).
    #[error("sqlite transaction failed")]
    Transaction(#[source] Arc<rusqlite::Error>),
    /// Another command of the same grouped transaction hit an error that made SQLite roll the
    /// whole transaction back, so nothing this command wrote was kept.
    #[error("sqlite transaction rolled back after an error in another command")]
    Aborted,
    /// The command queue is full: the store is overloaded. Only new work (an insert that
    /// reached the writer, a take-over) is refused this way; outcome writes and renewals wait
    /// for room instead.
    #[error("sqlite store queue is full ({capacity} commands waiting)")]
    QueueFull {
        /// The queue's capacity, in commands.
        capacity: usize,
    },
    /// The store thread has stopped (the store was closed, or the thread panicked).
    #[error("sqlite store thread has stopped")]
    Closed,
    /// The database file, its `-wal` or its `-shm` was deleted or replaced while the store
    /// had it open, or the `-shm` was truncated: writing on would keep records nobody can
    /// read after a restart (or corrupt the log, or fault on the lost shared memory), so
    /// every operation is refused. A deleted or replaced file renamed back is accepted
    /// again; after a truncated `-shm`, only a restart helps.
    #[error("the SQLite file {} was deleted, replaced or truncated while open", path.display())]
    FileGone {
        /// The file that changed, as opened: the database, or its `-wal` or `-shm`.
        path: std::path::PathBuf,
    },
    /// A database file changed (as for [`SqliteStoreError::FileGone`]) while this command
    /// ran: what it wrote was committed into a file that may be lost, or may come back
    /// (renamed back) with the write in it. Its outcome is unknown
    /// ([`StoreError::Unavailable`]), so the caller treats it as possibly kept.
    #[error("the SQLite file {} was deleted, replaced or truncated while this write committed", path.display())]
    FileChangedAtCommit {
        /// The file that changed, as opened: the database, or its `-wal` or `-shm`.
        path: std::path::PathBuf,
    },
    /// A read on the blocking thread pool did not finish (it panicked, or the runtime is
    /// shutting down).
    #[error("sqlite read task failed")]
    Reader(#[source] tokio::task::JoinError),
    /// The store thread could not be started.
    #[error("cannot start the sqlite store thread")]
    Spawn(#[source] std::io::Error),
    /// The database carries a schema version this build does not know (a newer idemgate
    /// migrated it, or `PRAGMA user_version` was changed by hand).
    #[error("database schema version {found} is unknown to this build (latest known: {latest})")]
    SchemaVersion {
        /// `PRAGMA user_version` of the database.
        found: i64,
        /// The latest version this build can migrate to.
        latest: i64,
    },
    /// The URL is not `sqlite://PATH`, `sqlite:PATH` or `sqlite::memory:`.
    #[error("invalid sqlite URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A stored row fails [`idemgate_core::RawRecord::validate`]. It is left untouched and
    /// never replayed.
    #[error("corrupt record: {detail}")]
    Corrupt {
        /// What is wrong, as the validation reports it.
        detail: String,
    },
}

impl SqliteStoreError {
    /// True when the error means "try again later": a busy or locked database, an I/O or
    /// open failure, a full disk, a full queue, a stopped store thread, a failed read task or
    /// a deleted database file.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Self::Sqlite(_) | Self::Transaction(_) => matches!(
                self.code(),
                Some(
                    ErrorCode::DatabaseBusy
                        | ErrorCode::DatabaseLocked
                        | ErrorCode::SystemIoFailure
                        | ErrorCode::CannotOpen
                        | ErrorCode::DiskFull
                        | ErrorCode::ReadOnly
                        | ErrorCode::PermissionDenied
                        | ErrorCode::FileLockingProtocolFailed
                        | ErrorCode::OutOfMemory
                )
            ),
            Self::Aborted
            | Self::QueueFull { .. }
            | Self::Closed
            | Self::FileGone { .. }
            | Self::FileChangedAtCommit { .. }
            | Self::Reader(_)
            | Self::Spawn(_) => true,
            Self::SchemaVersion { .. } | Self::InvalidUrl { .. } | Self::Corrupt { .. } => false,
        }
    }

    /// SQLite's error code, for an error SQLite reported.
    fn code(&self) -> Option<ErrorCode> {
        match self {
            Self::Sqlite(e) => e.sqlite_error_code(),
            Self::Transaction(e) => e.sqlite_error_code(),
            _ => None,
        }
    }

    /// True when SQLite answered "busy" or "locked": the same call may succeed later.
    pub(crate) fn is_busy(&self) -> bool {
        matches!(
            self.code(),
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
        )
    }

    /// True when a write that failed with this error may still have been kept: an I/O
    /// failure (it may have hit the commit), a file that changed while it committed, or a
    /// store thread that stopped or a read task that failed while the command was in its
    /// hands. Anything else is SQLite's definite
    /// answer ([`StoreError::outcome_unknown`]).
    fn outcome_unknown(&self) -> bool {
        matches!(
            self,
            Self::Closed | Self::Reader(_) | Self::Spawn(_) | Self::FileChangedAtCommit { .. }
        ) || self.code() == Some(ErrorCode::SystemIoFailure)
    }
}

impl From<SqliteStoreError> for StoreError {
    fn from(e: SqliteStoreError) -> Self {
        match e {
            SqliteStoreError::Corrupt { detail } => StoreError::Corrupt { detail },
            e if !e.outcome_unknown() => StoreError::Refused(Box::new(e)),
            e if e.is_unavailable() => StoreError::Unavailable(Box::new(e)),
            e => StoreError::Backend(Box::new(e)),
        }
    }
}

/// The validation's verdict on a row as a [`SqliteStoreError`]
/// ([`idemgate_core::RawRecord::validate`] only fails with [`StoreError::Corrupt`]).
pub(crate) fn invalid(e: StoreError) -> SqliteStoreError {
    match e {
        StoreError::Corrupt { detail } => SqliteStoreError::Corrupt { detail },
        other => SqliteStoreError::Corrupt {
            detail: other.to_string(),
        },
    }
}
