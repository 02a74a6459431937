//! [`RedisStoreError`] and its classification into [`StoreError`].

use idemgate_core::report::error_text as error_chain;
use idemgate_core::StoreError;
use redis::{ErrorKind, RedisError};

/// Errors of this crate: construction, the server check, and every store operation before
/// it is classified into [`StoreError`] for the HTTP layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisStoreError {
    /// The server or the driver failed (connection, timeout, command or script error).
    #[error("Redis request failed")]
    Redis(#[from] RedisError),
    /// A store URL this crate does not accept. The URL itself is not repeated (it may hold a
    /// password).
    #[error("invalid Redis URL: {reason}")]
    InvalidUrl {
        /// What is wrong, and which forms are accepted.
        reason: String,
    },
    /// Options this store cannot honour with the URL given (waiting for replicas on Redis
    /// Cluster).
    #[error("invalid Redis options: {reason}")]
    InvalidOptions {
        /// What is wrong, and what to set instead.
        reason: String,
    },
    /// A write ran on the primary but fewer replicas than
    /// [`crate::RedisOptions::wait_replicas`] acknowledged it within
    /// [`crate::RedisOptions::wait_timeout`] (`WAIT`). Its outcome is unknown to the caller:
    /// it may be lost in a failover, so it is answered as [`StoreError::Unavailable`], never
    /// as done.
    #[error(
        "{op}: the write was not acknowledged by {wanted} replicas within {timeout_ms} ms \
         ({acknowledged} acknowledged)"
    )]
    NotAcknowledged {
        /// The store operation (`insert_or_get`, `complete`, ...).
        op: &'static str,
        /// The replicas asked for.
        wanted: u32,
        /// The replicas that acknowledged in time.
        acknowledged: i64,
        /// How long the write waited, in ms.
        timeout_ms: u64,
    },
    /// A key prefix that would break the key layout.
    #[error("invalid key prefix {prefix:?}: {reason}")]
    InvalidPrefix {
        /// The prefix given.
        prefix: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// A stored record cannot be decoded; it is left untouched.
    #[error("corrupt record: {detail}")]
    Corrupt {
        /// What is wrong.
        detail: String,
    },
    /// A script answered with a reply of the wrong shape (a script of another version?).
    #[error("unexpected reply from Redis: {detail}")]
    UnexpectedReply {
        /// What was expected and what came.
        detail: String,
    },
}

/// Shorthand for this crate's results.
pub type Result<T, E = RedisStoreError> = std::result::Result<T, E>;

/// How a failure should be answered.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Class {
    Unavailable,
    Timeout,
    Corrupt,
    Backend,
}

fn classify_redis(e: &RedisError) -> Class {
    if e.is_timeout() {
        return Class::Timeout;
    }
    match e.kind() {
        // connection refused, reset or dropped, DNS, TLS, "reconnecting failed"
        ErrorKind::IoError
        // the cluster cannot serve the slot (failover, resharding, no node reachable)
        | ErrorKind::ClusterDown
        | ErrorKind::MasterDown
        | ErrorKind::TryAgain
        | ErrorKind::ClusterConnectionNotFound
        // loading its data set after a restart; a replica during failover
        | ErrorKind::BusyLoadingError
        | ErrorKind::ReadOnly
        // no Sentinel names a primary (a failover is running)
        | ErrorKind::MasterNameNotFoundBySentinel => Class::Unavailable,
        ErrorKind::ExtensionError => match e.code() {
            // out of memory under `noeviction`; a script is running too long
            Some("OOM" | "BUSY") => Class::Unavailable,
            // the record key holds something other than a hash
            Some("WRONGTYPE") => Class::Corrupt,
            _ => Class::Backend,
        },
        _ => Class::Backend,
    }
}

impl From<RedisStoreError> for StoreError {
    /// Classifies: connection refused, reset or dropped, TLS failure, cluster down or
    /// resharding (`CLUSTERDOWN`, `MASTERDOWN`, `TRYAGAIN`, no connection to the slot's
    /// node), a server loading its data set, a read-only replica, `OOM` and `BUSY`, a write
    /// too few replicas acknowledged ([`RedisStoreError::NotAcknowledged`]) →
    /// [`StoreError::Unavailable`]; an I/O timeout (connection or response) →
    /// [`StoreError::Timeout`]; an undecodable record or a record key of the wrong type
    /// (`WRONGTYPE`) → [`StoreError::Corrupt`]; anything else → [`StoreError::Backend`]. The
    /// original error is kept as the source wherever the variant has one. None of these is
    /// [`StoreError::Refused`]: every write is a Lua script, and a script that fails part-way
    /// keeps what it wrote (Redis does not roll back), so an error reply leaves the outcome
    /// unknown ([`StoreError::outcome_unknown`]), as I/O does.
    fn from(e: RedisStoreError) -> Self {
        let class = match &e {
            RedisStoreError::Redis(inner) => classify_redis(inner),
            RedisStoreError::NotAcknowledged { .. } => Class::Unavailable,
            RedisStoreError::Corrupt { .. } => Class::Corrupt,
            _ => Class::Backend,
        };
        match class {
            Class::Unavailable => StoreError::Unavailable(Box::new(e)),
            Class::Timeout => StoreError::Timeout,
            // `StoreError::Corrupt` has no source slot: its detail names the cause.
            Class::Corrupt => StoreError::Corrupt {
                detail: match e {
                    RedisStoreError::Corrupt { detail } => detail,
                    other => error_chain(&other),
                },
            },
            Class::Backend => StoreError::Backend(Box::new(e)),
        }
    }
}

/// Classifies a driver error (see `From<RedisStoreError> for StoreError`).
pub(crate) fn classify(e: RedisError) -> StoreError {
    RedisStoreError::from(e).into()
}

/// A corrupt-record error.
pub(crate) fn corrupt(detail: impl Into<String>) -> RedisStoreError {
    RedisStoreError::Corrupt {
        detail: detail.into(),
    }
}

/// An unexpected-reply error.
pub(crate) fn unexpected(detail: impl Into<String>) -> RedisStoreError {
    RedisStoreError::UnexpectedReply {
        detail: detail.into(),
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;
    use std::io;

    use super::*;

    #[test]
    fn connection_failures_are_unavailable_with_source() {
        for kind in [
            io::ErrorKind::ConnectionRefused,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::BrokenPipe,
        ] {
            let e = RedisError::from(io::Error::new(kind, "gone"));
            let store = classify(e);
            assert!(matches!(store, StoreError::Unavailable(_)), "{store:?}");
            let source = store.source().expect("source kept");
            let ours = source.downcast_ref::<RedisStoreError>().expect("ours");
            assert!(matches!(ours, RedisStoreError::Redis(_)));
            assert!(source.source().unwrap().is::<RedisError>());
        }
        for kind in [
            ErrorKind::ClusterDown,
            ErrorKind::MasterDown,
            ErrorKind::TryAgain,
        ] {
            let e = RedisError::from((kind, "cluster trouble"));
            assert!(matches!(classify(e), StoreError::Unavailable(_)));
        }
        let e = redis::make_extension_error("OOM".into(), Some("out of memory".into()));
        assert!(matches!(classify(e), StoreError::Unavailable(_)));
    }

    #[test]
    fn unacknowledged_writes_are_unavailable_and_say_why() {
        let e = RedisStoreError::NotAcknowledged {
            op: "complete",
            wanted: 1,
            acknowledged: 0,
            timeout_ms: 500,
        };
        let store = StoreError::from(e);
        assert!(matches!(store, StoreError::Unavailable(_)));
        assert!(store.outcome_unknown());
        let text = store.source().unwrap().to_string();
        assert!(text.contains("not acknowledged by 1 replicas"), "{text}");
    }

    #[test]
    fn timeouts_are_timeout() {
        let e = RedisError::from(io::Error::from(io::ErrorKind::TimedOut));
        assert!(matches!(classify(e), StoreError::Timeout));
    }

    #[test]
    fn undecodable_records_are_corrupt() {
        let e = corrupt("bad state");
        assert!(
            matches!(StoreError::from(e), StoreError::Corrupt { detail } if detail == "bad state")
        );
        let e = redis::make_extension_error(
            "WRONGTYPE".into(),
            Some("Operation against a key holding the wrong kind of value".into()),
        );
        assert!(
            matches!(classify(e), StoreError::Corrupt { detail } if detail.contains("WRONGTYPE"))
        );
    }

    #[test]
    fn the_rest_is_backend_with_source() {
        let e = RedisError::from((ErrorKind::ResponseError, "ERR", "syntax".into()));
        let store = classify(e);
        assert!(matches!(store, StoreError::Backend(_)));
        assert!(store.source().is_some());
        assert!(matches!(
            StoreError::from(unexpected("not an array")),
            StoreError::Backend(_)
        ));
    }
}
