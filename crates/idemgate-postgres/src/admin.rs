//! [`AdminStore`] for [`PostgresStore`]: operator reads, and the exact delete as one
//! transaction that locks the row (`SELECT ... FOR UPDATE`), compares it with what the
//! operator was shown, and deletes it, so no gateway can change it in between.

use idemgate_core::admin::{same_record, AdminStore, KeyFilter, Listing};
use idemgate_core::{RawRecord, ScopedKey, StoreError};
use sqlx::Row;

use crate::error::classify;
use crate::row;
use crate::sql::{ms, record_columns, NOW};
use crate::store::{key_query, PostgresStore};

impl PostgresStore {
    /// `SELECT false, <record columns>, user_id, route` of `filter`'s key: the primary key
    /// is used when a principal is given; otherwise the table is scanned.
    fn list_sql(&self, filter: &KeyFilter) -> String {
        let mut sql = format!(
            "SELECT false, {}, user_id, route FROM {} WHERE key = $1",
            record_columns(),
            self.table.qualified()
        );
        let mut n = 1;
        for (column, value) in [("user_id", &filter.principal), ("route", &filter.route)] {
            if value.is_some() {
                n += 1;
                sql.push_str(&format!(" AND {column} = ${n}"));
            }
        }
        sql.push_str(" ORDER BY route, user_id");
        sql
    }

    /// The database clock, in ms since the epoch.
    async fn db_now(&self) -> Result<i64, StoreError> {
        let sql = format!("SELECT {}", ms(NOW));
        let query = sqlx::query_scalar(&sql);
        query.fetch_one(&self.pool).await.map_err(classify)
    }
}

impl AdminStore for PostgresStore {
    async fn list_key(&self, filter: &KeyFilter) -> Result<Listing, StoreError> {
        let sql = self.list_sql(filter);
        let mut query = sqlx::query(&sql).bind(filter.key.as_str());
        for value in [&filter.principal, &filter.route].into_iter().flatten() {
            query = query.bind(value.as_str());
        }
        let rows = query.fetch_all(&self.pool).await.map_err(classify)?;
        let mut listing = Listing {
            now: 0,
            records: Vec::with_capacity(rows.len()),
        };
        for r in &rows {
            let scope = ScopedKey {
                principal: r.try_get(18).map_err(classify)?,
                route: r.try_get(19).map_err(classify)?,
                key: filter.key.clone(),
            };
            let read = row::decode(&scope, r)?;
            listing.now = read.now;
            listing.records.push(read.raw);
        }
        if rows.is_empty() {
            listing.now = self.db_now().await?;
        }
        Ok(listing)
    }

    async fn delete_exact(&self, seen: &RawRecord) -> Result<bool, StoreError> {
        let t = self.table.qualified();
        let key = "user_id = $1 AND route = $2 AND key = $3";
        let select = format!(
            "SELECT false, {} FROM {t} WHERE {key} FOR UPDATE",
            record_columns()
        );
        let mut tx = self.pool.begin().await.map_err(classify)?;
        let query = key_query(&select, &seen.key);
        let found = query.fetch_optional(&mut *tx).await.map_err(classify)?;
        let current = found.map(|r| row::decode(&seen.key, &r)).transpose()?;
        if !current.is_some_and(|c| same_record(seen, &c.raw)) {
            return Ok(false); // the transaction rolls back on drop
        }
        let delete = format!("DELETE FROM {t} WHERE {key}");
        let query = key_query(&delete, &seen.key);
        let done = query.execute(&mut *tx).await.map_err(classify)?;
        tx.commit().await.map_err(classify)?;
        Ok(done.rows_affected() == 1)
    }
}
