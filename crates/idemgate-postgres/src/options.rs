//! [`PostgresOptions`]: the connection settings that bound every store call.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::error::Result;

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
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            statement_timeout: Some(Duration::from_secs(2)),
            acquire_timeout: Duration::from_secs(2),
            max_connections: 16,
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

    /// The statement timeout set on new connections.
    pub fn statement_timeout(&self) -> Option<Duration> {
        self.statement_timeout
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
    /// startup options (no extra round trip), unless the URL sets one. Use it to build a
    /// pool for [`crate::PostgresStore::from_pool`] with the same bounds.
    ///
    /// # Errors
    /// [`crate::PostgresStoreError::Sqlx`] if the URL is invalid.
    pub fn connect_options(&self, url: &str) -> Result<PgConnectOptions> {
        let options = PgConnectOptions::from_str(url)?;
        let in_url = options
            .get_options()
            .is_some_and(|o| o.contains("statement_timeout"));
        Ok(match self.statement_timeout {
            Some(timeout) if !in_url => {
                options.options([("statement_timeout", timeout.as_millis().to_string())])
            }
            _ => options,
        })
    }
}
