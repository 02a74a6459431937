//! [`PostgresStore`]: construction, configuration and the [`IdempotencyStore`] primitives.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use idemgate_core::{
    AcquireOutcome, AcquireRequest, IdempotencyStore, Lease, ScopedKey, StoreError, StoredResponse,
    UnixMillis,
};
use sqlx::postgres::{PgPoolOptions, PgQueryResult};
use sqlx::{Executor, PgConnection, PgPool, Postgres, Row};

use crate::error::{classify, Result};
use crate::sql::{self, Statements, Table};
use crate::{migrate, row};

/// Longest lease or record TTL passed to the database: 100 years, in ms. Longer durations
/// are clamped to it.
const MAX_DURATION_MS: i64 = 100 * 365 * 86_400_000;

/// An [`IdempotencyStore`] on PostgreSQL, through a sqlx connection pool.
///
/// Cloning is cheap (the pool and the prepared SQL text are shared). Every time (TTL, lease)
/// is judged by the database clock, so replicas with skewed clocks agree. Each primitive is
/// one statement (acquire: an insert, then a read and a conditional update when the key
/// exists), each sqlx-prepared once per connection.
///
/// Call [`PostgresStore::migrate`] once before use (at start-up or from `idemgate migrate`).
#[derive(Clone)]
pub struct PostgresStore {
    pub(crate) pool: PgPool,
    pub(crate) table: Arc<Table>,
    pub(crate) sql: Arc<Statements>,
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
    i64::try_from(d.as_millis()).map_or(MAX_DURATION_MS, |ms| ms.min(MAX_DURATION_MS))
}

// === impl PostgresStore ===

impl PostgresStore {
    /// The pool settings [`PostgresStore::connect`] uses, tuned for a gateway: at most 16
    /// connections, none kept open when idle for 10 minutes, 2 s to get a connection before
    /// failing with [`StoreError::Unavailable`], and no health-check query before each use
    /// (`test_before_acquire(false)`: it would double the round trips of every command; a
    /// connection the server closed fails its next command once and is then discarded).
    pub fn pool_options() -> PgPoolOptions {
        PgPoolOptions::new()
            .max_connections(16)
            .min_connections(0)
            .acquire_timeout(Duration::from_secs(2))
            .idle_timeout(Duration::from_secs(600))
            .test_before_acquire(false)
    }

    /// Connects a pool with [`PostgresStore::pool_options`] to `url` and opens one connection
    /// to check it. The URL is a libpq-style URL, e.g.
    /// `postgres://user:pass@host:5432/db?sslmode=verify-full` (TLS through rustls); server
    /// settings go in `options`, e.g. `?options=-c%20statement_timeout%3D5s`. The table is
    /// `idempotency_records` unless changed with [`PostgresStore::with_table_name`].
    ///
    /// # Errors
    /// [`PostgresStoreError::Sqlx`] if the URL is invalid or the server cannot be reached or
    /// refuses the login.
    ///
    /// [`PostgresStoreError::Sqlx`]: crate::PostgresStoreError::Sqlx
    pub async fn connect(url: &str) -> Result<Self> {
        Ok(Self::from_pool(Self::pool_options().connect(url).await?))
    }

    /// A store on an existing pool (for example the application's own, so
    /// [`PostgresStore::complete_using`] can run in its transactions). Consider the settings
    /// of [`PostgresStore::pool_options`].
    pub fn from_pool(pool: PgPool) -> Self {
        let table = Table {
            schema: None,
            name: sql::DEFAULT_TABLE.to_owned(),
        };
        Self {
            pool,
            sql: Arc::new(Statements::new(&table)),
            table: Arc::new(table),
        }
    }

    /// Uses table `name` (default `idempotency_records`). The migrations are recorded in
    /// `<name>_migrations`.
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
        Ok(self.with_table(table))
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
        Ok(self.with_table(table))
    }

    fn with_table(self, table: Table) -> Self {
        Self {
            pool: self.pool,
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
        migrate::run(&self.pool, &self.table).await
    }

    /// Completes the record `lease` owns on `conn`, which may be a caller's transaction
    /// (`&mut *tx`): the business rows and the key's `completed` state then commit or roll
    /// back together. The same compare-and-set as [`IdempotencyStore::complete`].
    ///
    /// If the transaction rolls back, the key stays `in_progress` under its lease: retries
    /// get `409` until `lease_expires_at` (stop renewing it), then one takes over with a
    /// higher fence and runs the operation, which is safe because the first attempt's
    /// business effect never committed. A crash between acquire and commit behaves the same.
    /// Until the caller commits, the updated row is locked: an acquire of the same key waits
    /// for the commit or rollback.
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
    /// roll back then. Other errors are classified as for every store operation.
    pub async fn complete_using(
        &self,
        conn: &mut PgConnection,
        lease: &Lease,
        response: &StoredResponse,
    ) -> Result<(), StoreError> {
        self.complete_on(conn, lease, response).await
    }

    async fn complete_on<'c>(
        &self,
        executor: impl Executor<'c, Database = Postgres>,
        lease: &Lease,
        response: &StoredResponse,
    ) -> Result<(), StoreError> {
        let headers = response.encode_headers();
        let query = cas(&self.sql.complete, lease)
            .bind(i32::from(response.status))
            .bind(headers.as_slice())
            .bind(response.body.as_ref())
            .bind(response.replayable);
        // `Executor::execute` (a boxed future), so callers can spawn this future.
        held(executor.execute(query).await.map_err(classify)?)
    }
}

type PgQuery<'q> = sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>;

/// `sql` with the key bound as `$1..$3`.
pub(crate) fn key_query<'q>(sql: &'q str, key: &'q ScopedKey) -> PgQuery<'q> {
    sqlx::query(sql)
        .bind(key.principal.as_str())
        .bind(key.route.as_str())
        .bind(key.key.as_str())
}

/// `sql` with the compare-and-set parameters bound: key `$1..$3`, fence `$4`, token `$5`.
fn cas<'q>(sql: &'q str, lease: &'q Lease) -> PgQuery<'q> {
    key_query(sql, &lease.key)
        .bind(lease.fence)
        .bind(lease.token.0)
}

/// `Ok` if the compare-and-set changed the row, else [`StoreError::LeaseLost`].
fn held(done: PgQueryResult) -> Result<(), StoreError> {
    match done.rows_affected() {
        0 => Err(StoreError::LeaseLost),
        _ => Ok(()),
    }
}

// === impl IdempotencyStore for PostgresStore ===

impl IdempotencyStore for PostgresStore {
    /// Inserts (`INSERT ... ON CONFLICT DO NOTHING RETURNING`); if the key exists, reads it
    /// and applies [`idemgate_core::engine::decide`] on the database clock: an expired record
    /// is replaced (fence + 1), a takeover-eligible one is taken over (fence + 1) by an
    /// update that re-checks the rules and the fence it read; if that update finds the
    /// record changed, or the read finds it gone, it starts over.
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, StoreError> {
        Ok(self.acquire_inner(req).await?)
    }

    async fn renew(&self, lease: &Lease, lease_ttl: Duration) -> Result<UnixMillis, StoreError> {
        let row = cas(&self.sql.renew, lease)
            .bind(millis(lease_ttl))
            .fetch_optional(&self.pool)
            .await
            .map_err(classify)?;
        match row {
            Some(row) => row.try_get(0).map_err(classify),
            None => Err(StoreError::LeaseLost),
        }
    }

    async fn complete(&self, lease: &Lease, response: &StoredResponse) -> Result<(), StoreError> {
        self.complete_on(&self.pool, lease, response).await
    }

    async fn fail(&self, lease: &Lease) -> Result<(), StoreError> {
        held(
            cas(&self.sql.fail, lease)
                .execute(&self.pool)
                .await
                .map_err(classify)?,
        )
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        held(
            cas(&self.sql.release, lease)
                .execute(&self.pool)
                .await
                .map_err(classify)?,
        )
    }

    async fn get(
        &self,
        key: &ScopedKey,
    ) -> Result<Option<idemgate_core::IdempotencyRecord>, StoreError> {
        let Some(row) = self.read(key).await? else {
            return Ok(None);
        };
        let (record, now) = row::record(key, &row)?;
        Ok((now < record.expires_at).then_some(record))
    }

    /// Deletes up to `batch` expired rows in one statement that locks only those rows and
    /// skips rows other transactions hold; a row re-acquired meanwhile is not deleted.
    async fn purge_expired(&self, batch: NonZeroU32) -> Result<u64, StoreError> {
        let done = sqlx::query(&self.sql.purge)
            .bind(i64::from(batch.get()))
            .execute(&self.pool)
            .await
            .map_err(classify)?;
        Ok(done.rows_affected())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(classify)?;
        Ok(())
    }

    fn backend(&self) -> &'static str {
        "postgres"
    }
}
