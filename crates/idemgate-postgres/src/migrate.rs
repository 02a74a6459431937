//! The embedded migration runner.
//!
//! `sqlx::migrate!` cannot template a table name, so this crate runs its own: versioned SQL
//! files embedded at build time, with `{table}` (the quoted, schema-qualified table),
//! `{failovers}` (its failovers table) and `{name}` (the bare table name) substituted,
//! applied in one transaction under `pg_advisory_xact_lock` (so replicas starting together
//! take turns), and recorded in `<table>_migrations` with the MD5 of the template, so an
//! edited migration is detected.

use sqlx::{Executor, PgConnection, PgPool, Row};

use crate::error::{PostgresStoreError, Result};
use crate::sql::Table;

/// One embedded migration.
struct Migration {
    version: i64,
    description: &'static str,
    template: &'static str,
}

/// Every migration, in version order.
/// Never edit an applied migration: add a new one. Each must leave the table usable by a
/// gateway built before it (nullable columns, no renames), so replicas of two versions can
/// share the database during a rolling upgrade.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "idempotency_records",
        template: include_str!("../migrations/0001_idempotency_records.sql"),
    },
    Migration {
        version: 2,
        description: "response_checksum",
        template: include_str!("../migrations/0002_response_checksum.sql"),
    },
    Migration {
        version: 3,
        description: "purge_autovacuum",
        template: include_str!("../migrations/0003_purge_autovacuum.sql"),
    },
    Migration {
        version: 4,
        description: "failovers",
        template: include_str!("../migrations/0004_failovers.sql"),
    },
    Migration {
        version: 5,
        description: "response_key_id",
        template: include_str!("../migrations/0005_response_key_id.sql"),
    },
];

impl Migration {
    fn render(&self, table: &Table) -> String {
        self.template
            .replace("{table}", &table.qualified())
            .replace("{failovers}", &table.failovers())
            .replace("{name}", &table.name)
    }
}

/// Applies every embedded migration not yet recorded for `table`, all in one transaction.
/// Versions recorded in the database but unknown to this build (a newer idemgate migrated
/// first) are left alone, so a rolling upgrade never blocks an older replica.
/// Returns the migrations it applied (`"0001 idempotency_records"`), empty when none was
/// pending.
pub(crate) async fn run(pool: &PgPool, table: &Table) -> Result<Vec<String>> {
    // Executor methods (boxed futures) rather than `query(..).execute(conn)`: the generic
    // async fns would make this future not provably `Send` for `tokio::spawn`.
    let mut tx = pool.begin().await?;
    let conn: &mut PgConnection = &mut tx;
    let lock = sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(format!("idemgate-migrate:{}", table.display()))
        .persistent(false);
    conn.execute(lock).await?;
    if let Some(schema) = &table.schema {
        // Checked first: CREATE SCHEMA IF NOT EXISTS needs the CREATE privilege on the
        // database even when the schema exists.
        let exists = sqlx::query("SELECT 1 FROM pg_namespace WHERE nspname = $1")
            .bind(schema)
            .persistent(false);
        if conn.fetch_optional(exists).await?.is_none() {
            let create = format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\"");
            conn.execute(sqlx::raw_sql(&create)).await?;
        }
    }
    let log = table.migrations();
    let create_log = format!(
        "CREATE TABLE IF NOT EXISTS {log} (version BIGINT PRIMARY KEY, \
         description TEXT NOT NULL, checksum TEXT NOT NULL, \
         applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
    );
    conn.execute(sqlx::raw_sql(&create_log)).await?;
    let select = format!("SELECT checksum = md5($2) FROM {log} WHERE version = $1");
    let insert =
        format!("INSERT INTO {log} (version, description, checksum) VALUES ($1, $2, md5($3))");
    let mut applied = Vec::new();
    for m in MIGRATIONS {
        let recorded = sqlx::query(&select)
            .bind(m.version)
            .bind(m.template)
            .persistent(false);
        match conn.fetch_optional(recorded).await? {
            Some(row) if row.try_get::<bool, _>(0)? => continue,
            Some(_) => {
                return Err(PostgresStoreError::MigrationChanged {
                    version: m.version,
                    description: m.description,
                })
            }
            None => {}
        }
        conn.execute(sqlx::raw_sql(&m.render(table))).await?;
        let record = sqlx::query(&insert)
            .bind(m.version)
            .bind(m.description)
            .bind(m.template)
            .persistent(false);
        conn.execute(record).await?;
        applied.push(format!("{:04} {}", m.version, m.description));
    }
    tx.commit().await?;
    Ok(applied)
}
