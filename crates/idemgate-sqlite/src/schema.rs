//! Opening a connection: pragmas and migrations (`PRAGMA user_version`).

use std::time::Duration;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use crate::checkpoint::on_commit;
use crate::error::{Result, SqliteStoreError};
use crate::options::{SqliteLocation, SqliteOptions};

/// The migrations, in order; migration `i` (0-based) brings `user_version` to `i + 1`.
/// Applied migrations are never edited: a schema change is a new file.
const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/0001_idempotency_records.sql"),
    include_str!("../migrations/0002_response_checksum.sql"),
    include_str!("../migrations/0003_unsettled_index.sql"),
    include_str!("../migrations/0004_response_key_id.sql"),
];

/// The schema version this build migrates to.
pub(crate) const LATEST_VERSION: i64 = MIGRATIONS.len() as i64;

/// Enough for every statement the store prepares, so none is ever re-prepared.
const STATEMENT_CACHE: usize = 32;

/// Enough for every statement of the read path and the gauges.
const READER_STATEMENT_CACHE: usize = 16;

/// Opens the store's read-write connection: pragmas, then migrations.
pub(crate) fn open_writer(
    location: &SqliteLocation,
    options: &SqliteOptions,
) -> Result<Connection> {
    let mut conn = match location {
        SqliteLocation::Memory => Connection::open_in_memory()?,
        SqliteLocation::File(path) => Connection::open(path)?,
    };
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // First, so the pragmas and migrations below wait for other connections too.
    conn.busy_timeout(options.busy_timeout)?;
    if let SqliteLocation::File(_) = location {
        // Persistent: set once, the file stays in WAL mode. Answers the mode now in force.
        let _mode: String =
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
        // Checkpoints run on their own thread (crate::checkpoint); this is the safety net.
        conn.wal_hook(Some(on_commit));
        // When the WAL restarts, trim its file back to 64 MiB.
        conn.pragma_update(None, "journal_size_limit", 64i64 << 20)?;
    }
    conn.pragma_update(None, "synchronous", options.synchronous.pragma_value())?;
    migrate(&mut conn)?;
    Ok(conn)
}

/// Opens a read-only connection to a file already migrated (the read path, see
/// [`crate::readers`]). It never creates the file: a deleted database fails to open.
pub(crate) fn open_reader(path: &std::path::Path, busy_timeout: Duration) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.set_prepared_statement_cache_capacity(READER_STATEMENT_CACHE);
    conn.busy_timeout(busy_timeout)?;
    Ok(conn)
}

/// Brings the schema to [`LATEST_VERSION`] in one transaction. Idempotent: an up-to-date
/// database is only read; two processes migrating at once serialize on the write lock and
/// the second finds nothing to do.
pub(crate) fn migrate(conn: &mut Connection) -> Result<()> {
    if user_version(conn)? == LATEST_VERSION {
        return Ok(());
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found = user_version(&tx)?;
    if !(0..=LATEST_VERSION).contains(&found) {
        return Err(SqliteStoreError::SchemaVersion {
            found,
            latest: LATEST_VERSION,
        });
    }
    for (done, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", done as i64 + 1)?;
    }
    tx.commit()?;
    Ok(())
}

fn user_version(conn: &Connection) -> Result<i64> {
    Ok(conn.pragma_query_value(None, "user_version", |r| r.get(0))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_idempotent() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        migrate(&mut conn).unwrap();
        assert_eq!(user_version(&conn).unwrap(), LATEST_VERSION);
        let n: i64 = conn
            .query_row("SELECT count(*) FROM idempotency_records", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 0);
    }

    #[test]
    fn unknown_version_is_refused() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "user_version", LATEST_VERSION + 1)
            .unwrap();
        assert!(matches!(
            migrate(&mut conn),
            Err(SqliteStoreError::SchemaVersion { .. })
        ));
    }

    /// A gateway built before the checksum column re-acquires a row by rewriting its state:
    /// the stale checksum goes with it, so its later completion (without one) stays valid.
    #[test]
    fn reacquire_by_an_older_build_clears_the_checksum() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        conn.execute_batch(
            "INSERT INTO idempotency_records (principal, route, key, fingerprint,
             fingerprint_version, state, fence, status, response_headers, response_body,
             replayable, response_checksum, created_at, expires_at)
             VALUES ('p', 'r', 'k', x'00', 1, 'completed', 1, 201, x'', x'', 1, x'01', 0, 1);
             UPDATE idempotency_records SET state = 'failed';",
        )
        .unwrap();
        let checksum = |conn: &Connection| -> Option<Vec<u8>> {
            conn.query_row(
                "SELECT response_checksum FROM idempotency_records",
                [],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert_eq!(
            checksum(&conn),
            Some(vec![1]),
            "only a return to in_progress clears it"
        );
        conn.execute("UPDATE idempotency_records SET state = 'in_progress'", [])
            .unwrap();
        assert_eq!(checksum(&conn), None);
    }

    #[test]
    fn state_is_checked() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        let err = conn
            .execute(
                "INSERT INTO idempotency_records (principal, route, key, fingerprint,
                 fingerprint_version, state, fence, created_at, expires_at)
                 VALUES ('p', 'r', 'k', x'00', 1, 'done', 1, 0, 1)",
                [],
            )
            .unwrap_err();
        assert_eq!(
            err.sqlite_error_code(),
            Some(rusqlite::ErrorCode::ConstraintViolation)
        );
    }
}
