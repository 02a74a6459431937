//! [`SqliteOptions`], [`Synchronous`] and [`SqliteLocation`] (`sqlite://` URLs).

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::error::{Result, SqliteStoreError};

/// How hard SQLite pushes each commit to disk (`PRAGMA synchronous`, in WAL mode).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Synchronous {
    /// `NORMAL` (default): a commit survives a crash of the process, but the last commits
    /// before a power loss or OS crash may be lost (the database stays consistent). No
    /// `fsync` per commit, only at checkpoints.
    #[default]
    Normal,
    /// `FULL`: a commit also survives a power loss or OS crash, at the cost of an `fsync`
    /// per transaction (grouped commands share one).
    Full,
}

impl Synchronous {
    pub(crate) fn pragma_value(self) -> &'static str {
        match self {
            Self::Normal => "NORMAL",
            Self::Full => "FULL",
        }
    }
}

/// Settings of a [`crate::SqliteStore`]. Build with [`SqliteOptions::default`] and the
/// `with_*` methods.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// Durability of commits. Defaults to [`Synchronous::Normal`].
    pub synchronous: Synchronous,
    /// How long a command waits for a lock held by another connection (another process on
    /// the same file) before failing with [`idemgate_core::StoreError::Refused`].
    /// Defaults to 2000 ms.
    pub busy_timeout: Duration,
    /// How many commands may wait for the store thread. When the queue is full, new work
    /// (an insert that reaches the writer, a take-over) fails at once with
    /// [`idemgate_core::StoreError::Refused`] instead of piling up, while outcome writes
    /// (complete, fail, release), renewals and the other operations wait for room: the
    /// outcome of a request that already ran is never dropped. Defaults to 1024. Must be at
    /// least 1.
    pub queue_capacity: usize,
    /// At most this many queued commands run in one transaction (one commit for all, so one
    /// `fsync` under [`Synchronous::Full`]). 1 runs each command on its own. Defaults to 64.
    pub max_batch: usize,
    /// At most this many read-only connections serve reads on a file database (replays,
    /// `409`s, `get`, stats), next to the writer; in WAL mode they never wait for the write
    /// lock. Unused in memory. Defaults to 4. Must be at least 1.
    pub readers: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            synchronous: Synchronous::Normal,
            busy_timeout: Duration::from_millis(2000),
            queue_capacity: 1024,
            max_batch: 64,
            readers: 4,
        }
    }
}

impl SqliteOptions {
    /// Sets [`SqliteOptions::synchronous`].
    pub fn with_synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// Sets [`SqliteOptions::busy_timeout`].
    pub fn with_busy_timeout(mut self, busy_timeout: Duration) -> Self {
        self.busy_timeout = busy_timeout;
        self
    }

    /// Sets [`SqliteOptions::queue_capacity`] (at least 1; 0 is taken as 1).
    pub fn with_queue_capacity(mut self, commands: usize) -> Self {
        self.queue_capacity = commands.max(1);
        self
    }

    /// Sets [`SqliteOptions::max_batch`] (at least 1; 0 is taken as 1).
    pub fn with_max_batch(mut self, commands: usize) -> Self {
        self.max_batch = commands.max(1);
        self
    }

    /// Sets [`SqliteOptions::readers`] (at least 1; 0 is taken as 1).
    pub fn with_readers(mut self, connections: usize) -> Self {
        self.readers = connections.max(1);
        self
    }
}

/// Where the database lives, as parsed from a URL.
///
/// ```
/// use idemgate_sqlite::SqliteLocation;
///
/// assert_eq!(SqliteLocation::parse("sqlite::memory:")?, SqliteLocation::Memory);
/// assert_eq!(
///     SqliteLocation::parse("sqlite://./idemgate.db")?,
///     SqliteLocation::File("./idemgate.db".into())
/// );
/// assert_eq!(
///     SqliteLocation::parse("sqlite:///var/lib/idemgate.db")?,
///     SqliteLocation::File("/var/lib/idemgate.db".into())
/// );
/// # Ok::<(), idemgate_sqlite::SqliteStoreError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum SqliteLocation {
    /// A private in-memory database (`sqlite::memory:`); nothing survives the store.
    Memory,
    /// A database file, created if missing.
    File(PathBuf),
}

impl SqliteLocation {
    /// Parses `sqlite://PATH` (`sqlite://./idemgate.db`, `sqlite:///abs/path.db`),
    /// `sqlite:PATH`, or `sqlite::memory:` (also `sqlite://:memory:`). The path is taken
    /// literally (no percent-decoding).
    ///
    /// # Errors
    /// [`SqliteStoreError::InvalidUrl`] for another scheme, an empty path, or query parameters
    /// (`?mode=...`; set [`SqliteOptions`] instead).
    pub fn parse(url: &str) -> Result<Self> {
        let invalid = |reason| SqliteStoreError::InvalidUrl {
            url: url.to_owned(),
            reason,
        };
        let rest = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .ok_or_else(|| invalid("expected sqlite://PATH or sqlite::memory:"))?;
        if rest == ":memory:" {
            return Ok(Self::Memory);
        }
        if rest.is_empty() {
            return Err(invalid("the path is empty"));
        }
        if rest.contains('?') {
            return Err(invalid(
                "query parameters are not supported; use SqliteOptions",
            ));
        }
        Ok(Self::File(PathBuf::from(rest)))
    }
}

impl FromStr for SqliteLocation {
    type Err = SqliteStoreError;

    fn from_str(url: &str) -> Result<Self> {
        Self::parse(url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let file = |p: &str| SqliteLocation::File(p.into());
        assert_eq!(
            SqliteLocation::parse("sqlite://./a.db").unwrap(),
            file("./a.db")
        );
        assert_eq!(
            SqliteLocation::parse("sqlite:///abs/a.db").unwrap(),
            file("/abs/a.db")
        );
        assert_eq!(
            SqliteLocation::parse("sqlite://a.db").unwrap(),
            file("a.db")
        );
        assert_eq!(SqliteLocation::parse("sqlite:a.db").unwrap(), file("a.db"));
        assert_eq!(
            SqliteLocation::parse("sqlite::memory:").unwrap(),
            SqliteLocation::Memory
        );
        assert_eq!(
            SqliteLocation::parse("sqlite://:memory:").unwrap(),
            SqliteLocation::Memory
        );
        for bad in [
            "postgres://x",
            "sqlite://",
            "sqlite:",
            "sqlite://a.db?mode=ro",
            "a.db",
        ] {
            assert!(
                matches!(
                    SqliteLocation::parse(bad),
                    Err(SqliteStoreError::InvalidUrl { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn builders_clamp_to_one() {
        let o = SqliteOptions::default()
            .with_queue_capacity(0)
            .with_max_batch(0)
            .with_readers(0);
        assert_eq!((o.queue_capacity, o.max_batch, o.readers), (1, 1, 1));
    }
}
