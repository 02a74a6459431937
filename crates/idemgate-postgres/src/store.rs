//! [`PostgresStore`]: construction, configuration, migration and
//! [`PostgresStore::complete_using`]. The [`IdempotencyStore`] primitives are in
//! `primitives.rs` and `insert.rs`.
//!
//! [`IdempotencyStore`]: idemgate_core::IdempotencyStore

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemgate_core::record::duration_ms;
use idemgate_core::{Lease, ScopedKey, StoreError, StoredResponse};
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgConnection, PgPool};

use crate::connect::{self, Link};
use crate::error::Result;
use crate::journal::{self, Journal, JournalLink};
use crate::migrate;
use crate::options::PostgresOptions;
use crate::sql::{self, Statements, Table};
use crate::sync::SyncGuard;

/// Longest lease or record TTL passed to the database: 100 years, in ms. Longer durations
/// are clamped to it.
const MAX_DURATION_MS: i64 = 100 * 365 * 86_400_000;

/// An [`IdempotencyStore`](idemgate_core::IdempotencyStore) on PostgreSQL, through a sqlx
/// connection pool.
///
/// Cloning is cheap (the pool and the prepared SQL text are shared). Every time (TTL, lease)
/// is judged by the database clock, so replicas with skewed clocks agree. Each primitive is
/// one statement, sqlx-prepared once per connection (`insert_or_get` on a fresh or a live
/// key too; a race or an expired record adds a read or a conditional update). Connections
/// carry a `statement_timeout` ([`PostgresOptions`]), so a locked or stuck database fails a
/// call instead of holding it.
///
/// Call [`PostgresStore::migrate`] once before use (at start-up or from `idemgate migrate`).
#[derive(Clone)]
pub struct PostgresStore {
    pub(crate) pool: PgPool,
    pub(crate) table: Arc<Table>,
    pub(crate) sql: Arc<Statements>,
    /// The host checks and the failover watcher of a store made by `connect` (empty for
    /// [`PostgresStore::from_pool`]).
    pub(crate) link: Arc<Link>,
    /// The state of [`PostgresOptions::with_require_synchronous_replication`] (`None`
    /// unless a store made by `connect` requires it; `sync.rs`).
    pub(crate) sync: Option<Arc<SyncGuard>>,
    /// The forward journal and its task ([`PostgresOptions::with_forward_journal`]).
    pub(crate) journal: Option<Arc<JournalLink>>,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("table", &self.table.display())
            .field("pool_size", &self.pool.size())
            .finish()
    }
}

pub(crate) fn millis(d: Duration) -> i64 {
    duration_ms(d).min(MAX_DURATION_MS)
}

// === impl PostgresStore ===

impl PostgresStore {
    /// The pool settings [`PostgresStore::connect`] uses:
    /// [`PostgresOptions::pool_options`] of the defaults (at most 16 connections, 2 s to get
    /// one before failing with [`StoreError::Unavailable`], none kept open when idle for 10
    /// minutes, no health-check query before each use).
    pub fn pool_options() -> PgPoolOptions {
        PostgresOptions::default().pool_options()
    }

    /// Connects a pool with the default [`PostgresOptions`] (2 s statement timeout) to `url`
    /// and opens one connection to check it. The URL is a libpq-style URL, e.g.
    /// `postgres://user:pass@host:5432/db?sslmode=verify-full` (TLS through rustls); server
    /// settings go in `options`, e.g. `?options=-c%20statement_timeout%3D5s`. The table is
    /// `idempotency_records` unless changed with [`PostgresStore::with_table_name`].
    ///
    /// A list of hosts in libpq's syntax (`postgres://app@h1:5432,h2:5433/pay`) connects to
    /// the primary among them (`pg_is_in_recovery()` false; the highest timeline if several
    /// are), and a watcher checks it every second (one query on a connection of its own):
    /// when it is gone or in recovery, the watcher searches the hosts again and points the
    /// pool at the new primary. With `target_session_attrs=any`, the first host that accepts.
    ///
    /// Every new connection is checked first (one more round trip): a standby is refused
    /// (unless `target_session_attrs=any`), and so is another database (a system identifier
    /// other than the first one seen) or a former primary (a timeline behind the highest
    /// seen). A higher timeline is a failover: logged, counted in
    /// `idempotency_store_failovers_total{backend="postgres"}`, and idle connections opened
    /// before it are closed instead of reused. See [`PostgresStore::timeline`],
    /// [`PostgresStore::system_identifier`] and [`PostgresStore::last_refusal`].
    ///
    /// # Errors
    /// [`PostgresStoreError::Sqlx`] if the URL is invalid or the server cannot be reached or
    /// refuses the login; [`PostgresStoreError::Standby`] for a standby;
    /// [`PostgresStoreError::NoServer`] when no host of a list is usable;
    /// [`PostgresStoreError::InvalidUrl`] for a host list libpq would not accept.
    ///
    /// [`PostgresStoreError::Sqlx`]: crate::PostgresStoreError::Sqlx
    /// [`PostgresStoreError::Standby`]: crate::PostgresStoreError::Standby
    /// [`PostgresStoreError::NoServer`]: crate::PostgresStoreError::NoServer
    /// [`PostgresStoreError::InvalidUrl`]: crate::PostgresStoreError::InvalidUrl
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, &PostgresOptions::default()).await
    }

    /// [`PostgresStore::connect`] with other [`PostgresOptions`].
    ///
    /// # Errors
    /// As [`PostgresStore::connect`].
    pub async fn connect_with(url: &str, options: &PostgresOptions) -> Result<Self> {
        let journal = options.forward_journal().map(Journal::open).transpose()?;
        let (pool, link) = connect::connect(url, options, journal.as_ref())
            .await
            .map_err(|e| match &journal {
                Some(j) => j.refused_by_record(e),
                None => e,
            })?;
        let mut store = Self::from_pool(pool);
        store.link = Arc::new(link);
        if let (_, Some(name)) = options.table() {
            store = store.with_table_name(name)?;
        }
        if let (Some(schema), _) = options.table() {
            store = store.with_schema(schema)?;
        }
        if let Some(journal) = journal {
            store.journal = Some(store.start_journal(journal).await);
        }
        store.requiring_sync(options).await
    }

    /// Starts `journal`'s task on this store's pool and table, its gate closed first when
    /// the store's failovers table records a failover to the current timeline whose
    /// `failover_grace` has not passed (a process started or restarted during it), when it
    /// records none for a timeline above 1 (recorded then: the first start on it waits one
    /// grace), or when that cannot be read.
    async fn start_journal(&self, journal: Journal) -> Arc<JournalLink> {
        let sql = Arc::new(journal::Statements::new(&self.table));
        let primary: Arc<dyn journal::Primary> = match self.link.cluster() {
            Some(cluster) => cluster,
            None => Arc::new(connect::Unchecked),
        };
        let identity = primary.identity();
        if let Some(timeline) = identity.timeline {
            let id = identity.system_identifier;
            let grace = journal.options.failover_grace;
            // No row for a timeline above 1: no process has recorded this failover yet (or
            // none kept a journal then). Recorded now, so a process starting in the instant
            // after a promotion, before the others noticed it, waits too.
            let recorded = match sql.recorded_failover(&self.pool, id, timeline).await {
                Ok(None) if timeline > 1 => sql
                    .record_failover(&self.pool, id, timeline)
                    .await
                    .map(Some),
                recorded => recorded,
            };
            match recorded {
                Ok(Some((first, now))) if !journal::grace_left(first, now, grace).is_zero() => {
                    journal.gate.failover_seen()
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %idemgate_core::report::error_text(&e), "forward journal: the failovers table cannot be read; new keys wait for the journal's task");
                    journal.gate.failover_seen()
                }
            }
        }
        let statements = Arc::new(Mutex::new(sql));
        let journal = Arc::new(journal);
        let task = journal::spawn(
            journal.clone(),
            statements.clone(),
            self.pool.clone(),
            primary,
        );
        Arc::new(JournalLink {
            journal,
            statements,
            task: Mutex::new(Some(task)),
        })
    }

    /// Keeps `journal`, its SQL pointed at this store's table.
    fn with_journal(mut self, journal: Option<Arc<JournalLink>>) -> Self {
        if let Some(link) = &journal {
            *link.statements.lock().unwrap_or_else(|e| e.into_inner()) =
                Arc::new(journal::Statements::new(&self.table));
        }
        self.journal = journal;
        self
    }

    /// A store on an existing pool (for example the application's own, so
    /// [`PostgresStore::complete_using`] can run in its transactions). Consider the settings
    /// of [`PostgresStore::pool_options`], and build the pool's connect options with
    /// [`PostgresOptions::connect_options`]: without a `statement_timeout`, a locked row
    /// holds a store call until the lifecycle's deadline gives up on it.
    pub fn from_pool(pool: PgPool) -> Self {
        let table = Table {
            schema: None,
            name: sql::DEFAULT_TABLE.to_owned(),
        };
        Self::on_table(pool, Arc::default(), table)
    }

    /// Uses table `name` (default `idempotency_records`). The migrations are recorded in
    /// `<name>_migrations`. With a forward journal, set it in the options instead
    /// ([`PostgresOptions::with_table_name`]): a journal's task started by `connect_with`
    /// may restore into the table it had before this call.
    ///
    /// # Errors
    /// [`PostgresStoreError::InvalidIdentifier`] unless `name` is 1 to 39 bytes of `a-z`,
    /// `0-9` and `_`, not starting with a digit.
    ///
    /// [`PostgresStoreError::InvalidIdentifier`]: crate::PostgresStoreError::InvalidIdentifier
    pub fn with_table_name(self, name: &str) -> Result<Self> {
        sql::validate_identifier(name)?;
        let table = Table {
            schema: self.table.schema.clone(),
            name: name.to_owned(),
        };
        let journal = self.journal.clone();
        Ok(Self::on_table(self.pool, self.link, table)
            .with_sync(self.sync)
            .with_journal(journal))
    }

    /// Puts the table in schema `schema` instead of the connection's `search_path`.
    /// [`PostgresStore::migrate`] creates the schema if it is missing.
    ///
    /// # Errors
    /// [`PostgresStoreError::InvalidIdentifier`], with the rules of
    /// [`PostgresStore::with_table_name`].
    ///
    /// [`PostgresStoreError::InvalidIdentifier`]: crate::PostgresStoreError::InvalidIdentifier
    pub fn with_schema(self, schema: &str) -> Result<Self> {
        sql::validate_identifier(schema)?;
        let table = Table {
            schema: Some(schema.to_owned()),
            name: self.table.name.clone(),
        };
        let journal = self.journal.clone();
        Ok(Self::on_table(self.pool, self.link, table)
            .with_sync(self.sync)
            .with_journal(journal))
    }

    /// A store on `pool` (with `link`, its checks) and `table`, its statements built for
    /// that table.
    fn on_table(pool: PgPool, link: Arc<Link>, table: Table) -> Self {
        Self {
            pool,
            link,
            sync: None,
            journal: None,
            sql: Arc::new(Statements::new(&table)),
            table: Arc::new(table),
        }
    }

    /// The connection pool, e.g. to begin the transaction passed to
    /// [`PostgresStore::complete_using`].
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The table name, schema-qualified if a schema was set (unquoted, e.g.
    /// `idempotency_records`).
    pub fn table_name(&self) -> String {
        self.table.display()
    }

    /// Creates or upgrades the table from the embedded migrations, in one transaction under
    /// an advisory lock, so replicas may all call it at start-up. Applied versions are
    /// recorded in `<table>_migrations`; running it again is a no-op.
    ///
    /// # Errors
    /// [`PostgresStoreError::Sqlx`] if the database fails (nothing is applied then), or
    /// [`PostgresStoreError::MigrationChanged`] if an applied migration differs from the
    /// embedded one.
    ///
    /// [`PostgresStoreError::Sqlx`]: crate::PostgresStoreError::Sqlx
    /// [`PostgresStoreError::MigrationChanged`]: crate::PostgresStoreError::MigrationChanged
    pub async fn migrate(&self) -> Result<()> {
        migrate::run(&self.pool, &self.table).await.map(drop)
    }

    /// [`PostgresStore::migrate`], returning the migrations it applied (`"0001
    /// idempotency_records"`, in order); empty when the table was up to date.
    ///
    /// # Errors
    /// As [`PostgresStore::migrate`].
    pub async fn migrate_applied(&self) -> Result<Vec<String>> {
        migrate::run(&self.pool, &self.table).await
    }

    /// Completes the record `lease` owns on `conn`, which may be a caller's transaction
    /// (`&mut *tx`): the business rows and the key's `completed` state then commit or roll
    /// back together. The same compare-and-set as
    /// [`IdempotencyStore::complete`](idemgate_core::IdempotencyStore::complete), and the same
    /// response checksum.
    ///
    /// If the transaction rolls back, the key stays `in_progress` under its lease: retries
    /// get `409` until `lease_expires_at` (stop renewing it); then, on a route whose policy
    /// allows it, one takes over with a higher fence and runs the operation, which is safe
    /// because the first attempt's business effect never committed. A crash between insert
    /// and commit behaves the same. Until the caller commits, the updated row is locked:
    /// `insert_or_get` and `get` of the key do not wait and see it `in_progress` (retries
    /// get `409`); writes to it (a take-over, a renewal) wait for the commit or rollback,
    /// up to the statement timeout.
    ///
    /// Duplicates that wait on the key (a route with `on_in_flight = "wait"`) in other
    /// processes see the completion at their slow poll (2 s); to tell them at once, call
    /// [`IdempotencyStore::announce`](idemgate_core::IdempotencyStore::announce) with
    /// [`KeyEvent::written`](idemgate_core::events::KeyEvent::written) after the commit (not
    /// inside the transaction: see `events.rs` for what a `NOTIFY` in it costs).
    ///
    /// ```no_run
    /// # use idemgate_core::{Lease, StoredResponse};
    /// # use idemgate_postgres::PostgresStore;
    /// # async fn handler(store: &PostgresStore, lease: &Lease, response: &StoredResponse)
    /// #     -> Result<(), Box<dyn std::error::Error>> {
    /// let mut tx = store.pool().begin().await?;
    /// sqlx::query("INSERT INTO payments (amount) VALUES (10)").execute(&mut *tx).await?;
    /// store.complete_using(&mut *tx, lease, response).await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`StoreError::LeaseLost`] if the lease is stale (taken over, released, expired by TTL):
    /// roll back then. A lapsed lease that nobody took over still completes. Other errors
    /// are classified as for every store operation.
    pub async fn complete_using(
        &self,
        conn: &mut PgConnection,
        lease: &Lease,
        response: &StoredResponse,
    ) -> Result<(), StoreError> {
        self.complete_on(conn, lease, response).await
    }
}

/// `sql` with the key bound as `$1..$3`.
pub(crate) fn key_query<'q>(sql: &'q str, key: &'q ScopedKey) -> PgQuery<'q> {
    sqlx::query(sql)
        .bind(key.principal.as_str())
        .bind(key.route.as_str())
        .bind(key.key.as_str())
}

/// A query with its arguments bound.
pub(crate) type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;
