//! [`AdminStore`] for [`SqliteStore`]: operator reads on the read path, and the exact delete
//! on the store thread, in one `BEGIN IMMEDIATE` transaction (read, compare, delete), so no
//! other writer (another gateway process on the file) can change the row in between.

use idemgate_core::admin::{same_record, AdminStore, KeyFilter, Listing};
use idemgate_core::{now_millis, RawRecord, ScopedKey, StoreError};
use rusqlite::{params, Connection, OptionalExtension, ToSql};

use crate::error::Result;
use crate::row::{decode, RECORD_COLUMNS};
use crate::store::{Admission, SqliteStore};
use crate::worker::Access;

/// The rows of `filter`'s key (the primary key's prefix is used when a principal is given;
/// otherwise the table is scanned), decoded but not validated.
fn list(conn: &Connection, filter: &KeyFilter) -> Result<Vec<RawRecord>> {
    let mut sql = format!(
        "SELECT {RECORD_COLUMNS}, principal, route FROM idempotency_records WHERE key = ?1"
    );
    let key = filter.key.as_str();
    let mut args: Vec<&dyn ToSql> = vec![&key];
    if let Some(p) = &filter.principal {
        args.push(p);
        sql.push_str(&format!(" AND principal = ?{}", args.len()));
    }
    if let Some(r) = &filter.route {
        args.push(r);
        sql.push_str(&format!(" AND route = ?{}", args.len()));
    }
    sql.push_str(" ORDER BY route, principal");
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(args.as_slice(), |row| {
        let scope = ScopedKey {
            principal: row.get(15)?,
            route: row.get(16)?,
            key: filter.key.clone(),
        };
        decode(row, &scope)
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Reads the row of `seen.key`, and deletes it if it is still `seen`.
fn delete_exact(conn: &Connection, seen: &RawRecord) -> Result<bool> {
    let k = &seen.key;
    let sql = format!(
        "SELECT {RECORD_COLUMNS} FROM idempotency_records
         WHERE principal = ?1 AND route = ?2 AND key = ?3"
    );
    let args = params![k.principal, k.route, k.key.as_str()];
    let current = conn
        .prepare_cached(&sql)?
        .query_row(args, |row| decode(row, k))
        .optional()?;
    if !current.is_some_and(|c| same_record(seen, &c)) {
        return Ok(false);
    }
    let n = conn
        .prepare_cached(
            "DELETE FROM idempotency_records WHERE principal = ?1 AND route = ?2 AND key = ?3",
        )?
        .execute(args)?;
    Ok(n == 1)
}

impl AdminStore for SqliteStore {
    async fn list_key(&self, filter: &KeyFilter) -> Result<Listing, StoreError> {
        let filter = filter.clone();
        self.read(move |c| {
            Ok(Listing {
                now: now_millis(),
                records: list(c, &filter)?,
            })
        })
        .await
    }

    async fn delete_exact(&self, seen: &RawRecord) -> Result<bool, StoreError> {
        let seen = seen.clone();
        self.write(Admission::Wait, Access::Compound, move |c| {
            delete_exact(c, &seen)
        })
        .await
    }
}
