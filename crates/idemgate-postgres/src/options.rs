//! [`PostgresOptions`]: the connection settings that bound every store call.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::error::{PostgresStoreError, Result};
use crate::journal::ForwardJournalOptions;

/// Connection settings of [`crate::PostgresStore::connect_with`]. Each one bounds how long a
/// slow, locked or unreachable database can hold a request.
///
/// ```
/// use std::time::Duration;
///
/// use idemgate_postgres::PostgresOptions;
///
/// let options = PostgresOptions::new()
///     .with_statement_timeout(Some(Duration::from_secs(1)))
///     .with_max_connections(32);
/// assert_eq!(options.statement_timeout(), Some(Duration::from_secs(1)));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostgresOptions {
    statement_timeout: Option<Duration>,
    acquire_timeout: Duration,
    max_connections: u32,
    require_synchronous_replication: bool,
    forward_journal: Option<ForwardJournalOptions>,
    table: Option<String>,
    schema: Option<String>,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            statement_timeout: Some(Duration::from_secs(2)),
            acquire_timeout: Duration::from_secs(2),
            max_connections: 16,
            require_synchronous_replication: false,
            forward_journal: None,
            table: None,
            schema: None,
        }
    }
}

impl PostgresOptions {
    /// The defaults: 2 s statement timeout, 2 s to get a connection, 16 connections.
    pub fn new() -> Self {
        Self::default()
    }

    /// The server-side `statement_timeout` of every connection the store opens: a statement
    /// still running (or waiting for a row lock) after that long is cancelled by the server
    /// and fails with [`idemgate_core::StoreError::Timeout`]. Defaults to 2 seconds, whole
    /// milliseconds; `None` keeps the server's setting. A `statement_timeout` set in the
    /// URL (`?options=-c%20statement_timeout%3D5s`) takes precedence.
    ///
    /// It applies to every statement on the store's connections, including a caller's
    /// business statements in a transaction begun on [`crate::PostgresStore::pool`], and to
    /// [`crate::PostgresStore::migrate`], which then fails rather than queue behind a long
    /// transaction holding the table (run it again).
    pub fn with_statement_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.statement_timeout = timeout;
        self
    }

    /// How long a store call waits for a pooled connection, connecting included, before it
    /// fails with [`idemgate_core::StoreError::Unavailable`]. Defaults to 2 seconds.
    pub fn with_acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// The most connections the pool opens. Defaults to 16.
    pub fn with_max_connections(mut self, max: u32) -> Self {
        self.max_connections = max;
        self
    }

    /// Requires every write to wait for a synchronous standby. Defaults to false; without
    /// it nothing below happens and no statement is added.
    ///
    /// - The store's sessions run at `synchronous_commit = on`, set as a startup option (no
    ///   round trip) unless the URL sets `on` or `remote_apply`; any other value in the URL
    ///   fails [`PostgresOptions::connect_options`].
    /// - Connecting fails while the server's `synchronous_standby_names` is empty, or while
    ///   the role cannot read the LSN columns of `pg_stat_replication` (grant `pg_monitor`).
    /// - A write that changed a row (a fresh insert, a take-over, a renewal, an outcome) is
    ///   reported only once enough synchronous standbys have it: one more statement on the
    ///   same connection reads the primary's flushed WAL position and the standbys' flush
    ///   positions (replay positions under `remote_apply`), polled every 5 ms until they
    ///   reach it or the statement timeout passes (2 s without one). That is the cost: one
    ///   statement per write, and a poll per 5 ms the standbys lag (rare: commits wait for
    ///   them already). Unconfirmed, the write fails with
    ///   [`idemgate_core::StoreError::Unavailable`] (its outcome unknown) and is counted in
    ///   `idempotency_store_unconfirmed_writes_total{backend="postgres",op}`; the retry of
    ///   an unconfirmed outcome write that finds it already written confirms it again.
    /// - While no synchronous standby is connected, `synchronous_standby_names` was
    ///   emptied, or a store commit has waited over a second for the standby, new keys are
    ///   refused ([`idemgate_core::StoreError::Refused`]) and existing records still
    ///   returned (a read never waits for a standby).
    /// - Writes hold at most [`PostgresOptions::with_max_connections`] minus a reserve of a
    ///   quarter (at least 1) of the connections, so commits stuck on a stalled standby
    ///   never take the connections that replays are read on.
    ///
    /// Each write is run by a task of its own, which keeps its connection until the
    /// server answers even when the caller gave up: a commit waiting on a standby cannot
    /// be interrupted by the statement timeout.
    ///
    /// It applies to stores made by [`crate::PostgresStore::connect_with`] and
    /// [`crate::PostgresStore::from_url`], not to [`crate::PostgresStore::from_pool`].
    /// [`crate::PostgresStore::complete_using`] completes in the caller's transaction, whose
    /// commit waits for the standby (`synchronous_commit = on`) but is not confirmed.
    pub fn with_require_synchronous_replication(mut self, required: bool) -> Self {
        self.require_synchronous_replication = required;
        self
    }

    /// Keeps a forward journal ([`ForwardJournalOptions`]: what it writes, when it drops an
    /// entry, what a failover does). Defaults to none. It costs each acquire and each
    /// outcome one local SQLite write with an fsync (before the lease is handed out), and
    /// one statement a second on the store. The store's migrations must have run (the
    /// failovers table, `<table>_failovers`).
    ///
    /// It applies to stores made by [`crate::PostgresStore::connect_with`] and
    /// [`crate::PostgresStore::from_url`], whose connections are checked (the timeline is
    /// what tells a failover), not to [`crate::PostgresStore::from_pool`], and not to
    /// [`crate::PostgresStore::complete_using`] (the caller's transaction).
    pub fn with_forward_journal(mut self, journal: Option<ForwardJournalOptions>) -> Self {
        self.forward_journal = journal;
        self
    }

    /// The table of a store made by [`crate::PostgresStore::connect_with`], as
    /// [`crate::PostgresStore::with_table_name`] sets it (checked when connecting). Set it
    /// here rather than on the store when a forward journal is kept: its task then writes
    /// to this table from its first statement.
    pub fn with_table_name(mut self, name: impl Into<String>) -> Self {
        self.table = Some(name.into());
        self
    }

    /// The schema of the table, as [`crate::PostgresStore::with_schema`] sets it.
    pub fn with_schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// The table and schema set with [`PostgresOptions::with_table_name`] and
    /// [`PostgresOptions::with_schema`].
    pub(crate) fn table(&self) -> (Option<&str>, Option<&str>) {
        (self.schema.as_deref(), self.table.as_deref())
    }

    /// The forward journal, if any ([`PostgresOptions::with_forward_journal`]).
    pub fn forward_journal(&self) -> Option<&ForwardJournalOptions> {
        self.forward_journal.as_ref()
    }

    /// Whether [`PostgresOptions::with_require_synchronous_replication`] is set.
    pub fn require_synchronous_replication(&self) -> bool {
        self.require_synchronous_replication
    }

    /// The statement timeout set on new connections.
    pub fn statement_timeout(&self) -> Option<Duration> {
        self.statement_timeout
    }

    /// How long a call waits for a connection ([`PostgresOptions::with_acquire_timeout`]).
    pub(crate) fn acquire_timeout(&self) -> Duration {
        self.acquire_timeout
    }

    /// How many writes may hold a connection at once under
    /// [`PostgresOptions::with_require_synchronous_replication`]: the pool minus a reserve
    /// of a quarter of it (at least 1), and at least 1.
    pub(crate) fn write_permits(&self) -> usize {
        let max = self.max_connections as usize;
        max.saturating_sub((max / 4).max(1)).max(1)
    }

    /// The pool settings: [`PostgresOptions::with_max_connections`] and
    /// [`PostgresOptions::with_acquire_timeout`], none kept open when idle for 10 minutes,
    /// and no health-check query before each use (`test_before_acquire(false)`: it would
    /// double the round trips of every command; a connection the server closed fails its
    /// next command once and is then discarded).
    pub fn pool_options(&self) -> PgPoolOptions {
        PgPoolOptions::new()
            .max_connections(self.max_connections)
            .min_connections(0)
            .acquire_timeout(self.acquire_timeout)
            .idle_timeout(Duration::from_secs(600))
            .test_before_acquire(false)
    }

    /// Parses a libpq-style `url` and adds the statement timeout to the connection's
    /// startup options (no extra round trip), unless the URL sets one; with
    /// [`PostgresOptions::with_require_synchronous_replication`], `synchronous_commit=on`
    /// too, unless the URL sets `on` or `remote_apply`. Use it to build a pool for
    /// [`crate::PostgresStore::from_pool`] with the same bounds.
    ///
    /// # Errors
    /// [`crate::PostgresStoreError::Sqlx`] if the URL is invalid;
    /// [`crate::PostgresStoreError::InvalidUrl`] naming `synchronous_commit` if synchronous
    /// replication is required and the URL sets another value.
    pub fn connect_options(&self, url: &str) -> Result<PgConnectOptions> {
        let mut options = PgConnectOptions::from_str(url)?;
        let in_url = |name: &str| options.get_options().and_then(|o| setting(o, name));
        let commit = in_url(SYNCHRONOUS_COMMIT);
        let timeout_in_url = in_url("statement_timeout").is_some();
        if self.require_synchronous_replication {
            match commit.as_deref() {
                None => options = options.options([(SYNCHRONOUS_COMMIT, "on")]),
                Some("on" | "remote_apply") => {}
                Some(other) => {
                    return Err(PostgresStoreError::InvalidUrl {
                        reason: format!(
                            "the URL sets {SYNCHRONOUS_COMMIT}={other}: synchronous replication \
                             is required, which takes on or remote_apply"
                        ),
                    })
                }
            }
        }
        Ok(match self.statement_timeout {
            Some(timeout) if !timeout_in_url => {
                options.options([("statement_timeout", timeout.as_millis().to_string())])
            }
            _ => options,
        })
    }
}

/// The setting a commit's wait for standbys is chosen by.
const SYNCHRONOUS_COMMIT: &str = "synchronous_commit";

/// The value the startup `options` string (`-c name=value ...`) gives setting `name`, the
/// last one when it is set twice (as the server reads it).
fn setting(options: &str, name: &str) -> Option<String> {
    let (_, after) = options.rsplit_once(name)?;
    let value = after.trim_start().strip_prefix('=')?.trim_start();
    let end = value.find(char::is_whitespace).unwrap_or(value.len());
    Some(value[..end].trim_matches(['\'', '"']).to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_read_from_the_startup_options() {
        let o = "-c statement_timeout=5s -c synchronous_commit=remote_apply";
        assert_eq!(
            setting(o, "synchronous_commit").as_deref(),
            Some("remote_apply")
        );
        assert_eq!(setting(o, "statement_timeout").as_deref(), Some("5s"));
        assert_eq!(
            setting("-c synchronous_commit = ON", "synchronous_commit").as_deref(),
            Some("on")
        );
        assert_eq!(setting("-c work_mem=4MB", "synchronous_commit"), None);
    }

    #[test]
    fn synchronous_commit_is_set_unless_the_url_sets_an_accepted_value() {
        let sync = PostgresOptions::new().with_require_synchronous_replication(true);
        let set = |url: &str| {
            sync.connect_options(url)
                .map(|o| o.get_options().map(str::to_owned))
        };
        let plain = set("postgres://db/pay").unwrap().unwrap();
        assert!(plain.contains("synchronous_commit=on"), "{plain}");
        let apply = set("postgres://db/pay?options=-c%20synchronous_commit%3Dremote_apply");
        assert!(!apply.unwrap().unwrap().contains("synchronous_commit=on"));
        let err = set("postgres://db/pay?options=-c%20synchronous_commit%3Dremote_write");
        assert!(err.unwrap_err().to_string().contains("synchronous_commit"));
        let off = PostgresOptions::new()
            .connect_options("postgres://db/pay")
            .unwrap();
        assert!(!off.get_options().unwrap().contains("synchronous_commit"));
    }

    #[test]
    fn writes_leave_a_reserve_of_connections() {
        let permits = |max| {
            PostgresOptions::new()
                .with_max_connections(max)
                .write_permits()
        };
        assert_eq!(
            [permits(1), permits(2), permits(4), permits(16)],
            [1, 1, 3, 12]
        );
    }
}
