//! Test helpers: the gated database URL, per-run table names, and [`TestStore`], which
//! drops its table when the test ends (passed or failed).
#![allow(dead_code)] // each test binary uses a different subset

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use idemgate_postgres::PostgresStore;
use sqlx::{Connection, PgConnection};

/// The environment variable holding the test database URL.
pub(crate) const URL_VAR: &str = "IDEMGATE_TEST_DATABASE_URL";

/// Test tables older than this are dropped by later runs (a run never lasts this long).
const STALE_AFTER_SECS: u64 = 3600;

/// The test database URL, or `None` after printing why the test is skipped.
pub(crate) fn url() -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            println!("skipping: {URL_VAR} is not set");
            None
        }
    }
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A table name of its own for this run: `idem_test_<unix secs>_<random hex>`.
pub(crate) fn table_name() -> String {
    format!("idem_test_{}_{:08x}", unix_secs(), rand::random::<u32>())
}

/// Connects to the test database with table `table` and migrates it; `None` when the URL is
/// not set.
pub(crate) async fn store_with_table(table: &str) -> Option<PostgresStore> {
    let url = url()?;
    let store = PostgresStore::connect(&url)
        .await
        .expect("connect to the test database")
        .with_table_name(table)
        .unwrap();
    sweep_stale_tables(&store).await;
    store.migrate().await.expect("migrate");
    Some(store)
}

/// A store on a fresh table of its own, dropped with the store.
pub(crate) async fn fresh_store() -> Option<TestStore> {
    let store = store_with_table(&table_name()).await?;
    TestStore::adopt(store)
}

/// A [`PostgresStore`] on a table of its own that is dropped (with its migrations table)
/// when this value is, so a failed test cleans up too. Derefs to the store.
#[derive(Debug)]
pub(crate) struct TestStore {
    store: PostgresStore,
    url: String,
}

impl TestStore {
    /// Takes `store` (on a table of the test's own, in the default schema) so its table is
    /// dropped with it. `None` when the test URL is not set.
    pub(crate) fn adopt(store: PostgresStore) -> Option<Self> {
        Some(Self { store, url: url()? })
    }
}

impl Deref for TestStore {
    type Target = PostgresStore;
    fn deref(&self) -> &PostgresStore {
        &self.store
    }
}

impl Drop for TestStore {
    fn drop(&mut self) {
        // Drop cannot await: a short-lived runtime on its own thread, on its own connection.
        let (url, name) = (self.url.clone(), self.store.table_name());
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let mut conn = PgConnection::connect(&url).await?;
                sqlx::raw_sql(&drop_sql(&name)).execute(&mut conn).await?;
                conn.close().await
            })?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) && !std::thread::panicking() {
            panic!("could not drop test table: {dropped:?}");
        }
    }
}

/// Drops table `name`, its migrations and failovers tables, waiting at most 5 s for locks (one
/// implicit transaction: a multi-statement simple query).
fn drop_sql(name: &str) -> String {
    format!(
        "SET LOCAL lock_timeout = '5s'; DROP TABLE IF EXISTS \"{name}\"; \
         DROP TABLE IF EXISTS \"{name}_migrations\"; DROP TABLE IF EXISTS \"{name}_failovers\""
    )
}

idemgate_core::delegate_store!(TestStore, store);
idemgate_core::delegate_admin!(TestStore, store);

/// Drops the store's table and its migrations table (for stores not made by
/// [`fresh_store`]).
pub(crate) async fn drop_table(store: &PostgresStore) {
    sqlx::raw_sql(&drop_sql(&store.table_name()))
        .execute(store.pool())
        .await
        .expect("drop test table");
}

/// Best effort, once per process: drops `idem_test_<secs>_*` tables that earlier runs left
/// behind more than an hour ago (a run killed before its stores were dropped).
async fn sweep_stale_tables(store: &PostgresStore) {
    static SWEPT: AtomicBool = AtomicBool::new(false);
    if SWEPT.swap(true, Ordering::SeqCst) {
        return;
    }
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT tablename::text FROM pg_tables \
         WHERE schemaname = current_schema() AND tablename LIKE 'idem\\_test\\_%'",
    )
    .fetch_all(store.pool())
    .await
    .unwrap_or_default();
    let cutoff = unix_secs().saturating_sub(STALE_AFTER_SECS);
    for name in names {
        let created = name
            .strip_prefix("idem_test_")
            .and_then(|rest| rest.split('_').next())
            .and_then(|secs| secs.parse::<u64>().ok());
        if created.is_some_and(|secs| secs < cutoff) {
            let _ = sqlx::raw_sql(&format!("DROP TABLE IF EXISTS \"{name}\""))
                .execute(store.pool())
                .await;
        }
    }
}
