//! [`PostgresStoreError`] and its classification into [`StoreError`].

use idemgate_core::report::error_text as error_chain;
use idemgate_core::StoreError;

/// Errors of this crate: construction, migration, and every store operation before it is
/// classified into [`StoreError`] for the HTTP layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostgresStoreError {
    /// The database or the driver failed (connection, pool, SQL, decoding).
    #[error("PostgreSQL request failed")]
    Sqlx(#[from] sqlx::Error),
    /// A store URL this crate does not accept. The URL itself is not repeated (it may hold a
    /// password).
    #[error("invalid PostgreSQL URL: {reason}")]
    InvalidUrl {
        /// What is wrong, and which form is accepted.
        reason: String,
    },
    /// A table or schema name that is not a plain lower-case identifier.
    #[error("invalid PostgreSQL identifier {name:?}: {reason}")]
    InvalidIdentifier {
        /// The name given.
        name: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// A migration already applied to the database differs from the one this build embeds
    /// (same version, different SQL). Nothing was changed.
    #[error("migration {version} ({description}) differs from the one applied to the database")]
    MigrationChanged {
        /// The migration's version.
        version: i64,
        /// The migration's description.
        description: &'static str,
    },
    /// A stored record fails validation
    /// ([`RawRecord::validate`](idemgate_core::RawRecord::validate)); it is left untouched.
    #[error("corrupt record: {detail}")]
    Corrupt {
        /// What is wrong.
        detail: String,
    },
    /// The server is a standby (`pg_is_in_recovery()` is true) and the URL asks for the
    /// primary (`target_session_attrs` `read-write` or `primary`, the default): a store that
    /// writes needs the primary. Classified as [`StoreError::Unavailable`].
    #[error(
        "the server at {host} is a standby (pg_is_in_recovery() is true); \
         the store writes, so it needs the primary"
    )]
    Standby {
        /// The server, as `host:port`.
        host: String,
    },
    /// The server's system identifier (`pg_control_system()`) differs from the one this store
    /// first connected to: another database, not a failover. Classified as
    /// [`StoreError::Unavailable`].
    #[error(
        "the server at {host} is another database: system identifier {found}, \
         but this store's database has system identifier {expected}"
    )]
    OtherDatabase {
        /// The server, as `host:port`.
        host: String,
        /// The system identifier the store first saw.
        expected: u64,
        /// The server's.
        found: u64,
    },
    /// The server's timeline is lower than one this store already used: a former primary
    /// that missed the writes made after a failover. Classified as
    /// [`StoreError::Unavailable`].
    #[error(
        "the server at {host} is on timeline {found}, behind timeline {seen} \
         this store already used: a former primary that missed writes"
    )]
    TimelineBehind {
        /// The server, as `host:port`.
        host: String,
        /// The highest timeline the store saw.
        seen: u32,
        /// The server's.
        found: u32,
    },
    /// No host of the URL's list is usable; `tried` says why, host by host. Classified as
    /// [`StoreError::Unavailable`].
    #[error("no host of the store URL is usable: {tried}")]
    NoServer {
        /// `host:port: reason` for each host, separated by `; `.
        tried: String,
    },
    /// `insert_or_get` lost the race for one record this many times in a row (the record
    /// kept changing between its read and its write). Classified as [`StoreError::Conflict`].
    #[error("insert_or_get gave up after {attempts} attempts: the record kept changing")]
    Contention {
        /// How many insert-read-write rounds were tried.
        attempts: u32,
    },
    /// The forward journal ([`crate::ForwardJournalOptions`]) cannot be used: its file
    /// cannot be opened or is held by another process, or it was written against another
    /// database or a later timeline than the server's. Classified as
    /// [`StoreError::Unavailable`].
    #[error("forward journal: {reason}")]
    Journal {
        /// What is wrong, naming the file.
        reason: String,
    },
}

/// Shorthand for this crate's results.
pub type Result<T, E = PostgresStoreError> = std::result::Result<T, E>;

/// How a failure should be answered.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Class {
    Unavailable,
    Timeout,
    Conflict,
    Corrupt,
    /// The server answered the statement with an error: it failed (and rolled back).
    Refused,
    Backend,
}

fn classify_sqlx(e: &sqlx::Error) -> Class {
    use sqlx::Error as E;
    match e {
        E::Io(_) | E::Tls(_) | E::PoolTimedOut | E::PoolClosed | E::WorkerCrashed => {
            Class::Unavailable
        }
        E::Database(db) => match db.code().as_deref() {
            // query_canceled (statement_timeout), lock_not_available (lock_timeout)
            Some("57014" | "55P03") => Class::Timeout,
            // serialization_failure, deadlock_detected
            Some("40001" | "40P01") => Class::Conflict,
            // connection exceptions; admin/crash shutdown, cannot connect now; too many
            // connections; read-only transaction (a standby, e.g. mid-failover)
            Some(code)
                if code.starts_with("08")
                    || matches!(code, "57P01" | "57P02" | "57P03" | "53300" | "25006") =>
            {
                Class::Unavailable
            }
            // Any other error the server answered (a key over the btree's maximum index
            // row size, a check constraint): the statement failed, nothing was written.
            // `insert_or_get`'s statements each commit alone, so an error in a later one
            // leaves nothing of this call behind either.
            _ => Class::Refused,
        },
        E::ColumnDecode { .. }
        | E::Decode(_)
        | E::ColumnNotFound(_)
        | E::ColumnIndexOutOfBounds { .. }
        | E::TypeNotFound { .. } => Class::Corrupt,
        _ => Class::Backend,
    }
}

impl From<PostgresStoreError> for StoreError {
    /// Classifies: connection refused or reset, TLS failure, pool timed out or closed,
    /// server shutting down or full → [`StoreError::Unavailable`]; statement or lock timeout
    /// (SQLSTATE 57014, 55P03) → [`StoreError::Timeout`]; serialization failure or deadlock
    /// (40001, 40P01) and insert contention → [`StoreError::Conflict`]; a server refused
    /// when connecting (a standby, another database, a timeline behind, no usable host) →
    /// [`StoreError::Unavailable`]; a record that fails
    /// validation or a column that does not decode → [`StoreError::Corrupt`]; any other error
    /// the server answered (SQLSTATE, e.g. 54000 for a key over the index row size) →
    /// [`StoreError::Refused`] (definite: nothing was written); anything else (a protocol
    /// error, the worker gone) → [`StoreError::Backend`]. Only `Unavailable` (I/O after the
    /// statement may have been sent), `Timeout` and `Backend` leave the outcome unknown
    /// ([`StoreError::outcome_unknown`]). The original error is kept as the source wherever
    /// the variant has one.
    fn from(e: PostgresStoreError) -> Self {
        let class = match &e {
            PostgresStoreError::Sqlx(inner) => classify_sqlx(inner),
            PostgresStoreError::Corrupt { .. } => Class::Corrupt,
            PostgresStoreError::Contention { .. } => Class::Conflict,
            PostgresStoreError::Standby { .. }
            | PostgresStoreError::OtherDatabase { .. }
            | PostgresStoreError::TimelineBehind { .. }
            | PostgresStoreError::NoServer { .. }
            | PostgresStoreError::Journal { .. } => Class::Unavailable,
            _ => Class::Backend,
        };
        match class {
            Class::Unavailable => StoreError::Unavailable(Box::new(e)),
            Class::Timeout => StoreError::Timeout,
            Class::Conflict => StoreError::Conflict(Box::new(e)),
            // `StoreError::Corrupt` has no source slot: its detail names the cause.
            Class::Corrupt => StoreError::Corrupt {
                detail: match e {
                    PostgresStoreError::Corrupt { detail } => detail,
                    other => error_chain(&other),
                },
            },
            Class::Refused => StoreError::Refused(Box::new(e)),
            Class::Backend => StoreError::Backend(Box::new(e)),
        }
    }
}

/// Classifies a driver error (see `From<PostgresStoreError> for StoreError`).
pub(crate) fn classify(e: sqlx::Error) -> StoreError {
    PostgresStoreError::from(e).into()
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;
    use std::io;

    use super::*;

    #[test]
    fn connection_failures_are_unavailable_with_source() {
        let refused = io::Error::new(io::ErrorKind::ConnectionRefused, "refused");
        for e in [
            sqlx::Error::Io(refused),
            sqlx::Error::PoolTimedOut,
            sqlx::Error::PoolClosed,
        ] {
            let store = classify(e);
            assert!(matches!(store, StoreError::Unavailable(_)), "{store:?}");
            let source = store.source().expect("source kept");
            assert!(source.downcast_ref::<PostgresStoreError>().is_some());
            assert!(source
                .source()
                .unwrap()
                .downcast_ref::<sqlx::Error>()
                .is_some());
        }
    }

    #[test]
    fn decode_failures_are_corrupt() {
        let e = sqlx::Error::ColumnNotFound("state".into());
        assert!(matches!(classify(e), StoreError::Corrupt { detail } if detail.contains("state")));
        let e = PostgresStoreError::Corrupt {
            detail: "bad state".into(),
        };
        assert!(
            matches!(StoreError::from(e), StoreError::Corrupt { detail } if detail == "bad state")
        );
    }

    #[test]
    fn servers_refused_when_connecting_are_unavailable() {
        let host = || "db:5432".to_owned();
        for e in [
            PostgresStoreError::Standby { host: host() },
            PostgresStoreError::OtherDatabase {
                host: host(),
                expected: 1,
                found: 2,
            },
            PostgresStoreError::TimelineBehind {
                host: host(),
                seen: 3,
                found: 2,
            },
            PostgresStoreError::NoServer { tried: host() },
        ] {
            assert!(matches!(StoreError::from(e), StoreError::Unavailable(_)));
        }
    }

    #[test]
    fn contention_is_conflict_and_the_rest_backend() {
        let e = PostgresStoreError::Contention { attempts: 3 };
        assert!(matches!(StoreError::from(e), StoreError::Conflict(_)));
        let e = sqlx::Error::Protocol("unexpected message".into());
        assert!(matches!(classify(e), StoreError::Backend(_)));
    }
}
