//! Table names and the SQL text of every statement, built once per table.
//!
//! Every time is judged by the database clock: [`NOW`] is `statement_timestamp()` (the same
//! value throughout one statement, equal to `now()` outside an explicit transaction and still
//! current inside a caller's long transaction), truncated to milliseconds so the SQL
//! comparisons and [`idemgate_core::engine::decide`] see exactly the same integers.

use crate::error::PostgresStoreError;

/// The default table name.
pub(crate) const DEFAULT_TABLE: &str = "idempotency_records";

/// Longest accepted identifier, in bytes: PostgreSQL's limit is 63, and the longest derived
/// name (`<table>_completed_status_check`) adds 23 (one byte to spare).
pub(crate) const MAX_IDENTIFIER_BYTES: usize = 39;

/// The database clock, truncated to milliseconds.
const NOW: &str = "date_trunc('milliseconds', statement_timestamp())";

/// `expr` (a `timestamptz`) as ms since the epoch (`bigint`); NULL stays NULL.
fn ms(expr: &str) -> String {
    format!("(extract(epoch from {expr}) * 1000)::bigint")
}

/// Checks that `name` is a plain identifier: 1 to [`MAX_IDENTIFIER_BYTES`] bytes of `a-z`,
/// `0-9` and `_`, not starting with a digit. Lower case only, so the quoted name used by the
/// store and the unquoted name an operator types in `psql` are the same table.
pub(crate) fn validate_identifier(name: &str) -> Result<(), PostgresStoreError> {
    let reason = if name.is_empty() {
        Some("empty")
    } else if name.len() > MAX_IDENTIFIER_BYTES {
        Some("longer than 39 bytes")
    } else if name.starts_with(|c: char| c.is_ascii_digit()) {
        Some("starts with a digit")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        Some("only a-z, 0-9 and _ are allowed")
    } else {
        None
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(PostgresStoreError::InvalidIdentifier {
            name: name.to_owned(),
            reason,
        }),
    }
}

/// A validated table name, optionally in a schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Table {
    pub(crate) schema: Option<String>,
    pub(crate) name: String,
}

impl Table {
    /// The quoted, schema-qualified name of the table itself.
    pub(crate) fn qualified(&self) -> String {
        self.qualify(&self.name)
    }

    /// The quoted, schema-qualified name of the migrations table (`<table>_migrations`).
    pub(crate) fn migrations(&self) -> String {
        self.qualify(&format!("{}_migrations", self.name))
    }

    /// `schema.table` unquoted, for messages and lock keys.
    pub(crate) fn display(&self) -> String {
        match &self.schema {
            Some(schema) => format!("{schema}.{}", self.name),
            None => self.name.clone(),
        }
    }

    fn qualify(&self, name: &str) -> String {
        match &self.schema {
            Some(schema) => format!("\"{schema}\".\"{name}\""),
            None => format!("\"{name}\""),
        }
    }
}

/// The text of every statement the store runs against one table. sqlx prepares each one
/// once per connection and reuses it.
#[derive(Debug)]
pub(crate) struct Statements {
    /// `$1..$3` key, `$4` digest, `$5` fp version, `$6` token, `$7` lease ms, `$8` ttl ms.
    /// Returns `(fence, lease_expires_at ms)` when it inserted.
    pub(crate) insert: String,
    /// `$1..$3` key. Returns the [`crate::row`] columns.
    pub(crate) read: String,
    /// [`Statements::insert`]'s parameters, `$9` the fence read. Replaces an expired record.
    pub(crate) reinsert_expired: String,
    /// `$1..$3` key, `$4` digest, `$5` fp version, `$6` token, `$7` lease ms, `$8` the fence
    /// read, `$9` max lease ms, `$10` lease takeover allowed, `$11` retry failed allowed.
    pub(crate) takeover: String,
    /// CAS on `$1..$3` key, `$4` fence, `$5` token; `$6` lease ms. Returns the new expiry.
    pub(crate) renew: String,
    /// CAS as renew; `$6` status, `$7` headers, `$8` body, `$9` replayable.
    pub(crate) complete: String,
    /// CAS as renew.
    pub(crate) fail: String,
    /// CAS as renew.
    pub(crate) release: String,
    /// `$1` batch size.
    pub(crate) purge: String,
}

impl Statements {
    pub(crate) fn new(table: &Table) -> Self {
        let t = table.qualified();
        let now = NOW;
        let lease_end = ms("lease_expires_at");
        let key = "user_id = $1 AND route = $2 AND key = $3";
        let held = format!(
            "{key} AND state = 'in_progress' AND fence = $4 AND lease_token = $5 \
             AND expires_at > {now}"
        );
        Self {
            insert: format!(
                "INSERT INTO {t} (user_id, route, key, request_hash, fingerprint_version, \
                 state, fence, lease_token, lease_expires_at, created_at, expires_at) \
                 VALUES ($1, $2, $3, $4, $5, 'in_progress', 1, $6, \
                 {now} + $7 * interval '1 millisecond', {now}, \
                 {now} + greatest($8, $7) * interval '1 millisecond') \
                 ON CONFLICT (user_id, route, key) DO NOTHING \
                 RETURNING fence, {lease_end}"
            ),
            read: format!(
                "SELECT request_hash, fingerprint_version, state, fence, lease_token, \
                 {lease_end}, {}, {}, {}, status, response_headers, response, replayable, {} \
                 FROM {t} WHERE {key}",
                ms("created_at"),
                ms("completed_at"),
                ms("expires_at"),
                ms(now),
            ),
            reinsert_expired: format!(
                "UPDATE {t} SET request_hash = $4, fingerprint_version = $5, \
                 state = 'in_progress', fence = fence + 1, lease_token = $6, \
                 lease_expires_at = {now} + $7 * interval '1 millisecond', \
                 created_at = {now}, completed_at = NULL, \
                 expires_at = {now} + greatest($8, $7) * interval '1 millisecond', \
                 status = NULL, response_headers = NULL, response = NULL, replayable = NULL \
                 WHERE {key} AND fence = $9 AND expires_at <= {now} \
                 RETURNING fence, {lease_end}"
            ),
            takeover: format!(
                "UPDATE {t} SET state = 'in_progress', fence = fence + 1, lease_token = $6, \
                 lease_expires_at = {now} + $7 * interval '1 millisecond', \
                 expires_at = greatest(expires_at, {now} + $7 * interval '1 millisecond'), \
                 completed_at = NULL, \
                 status = NULL, response_headers = NULL, response = NULL, replayable = NULL \
                 WHERE {key} AND fence = $8 AND expires_at > {now} \
                 AND request_hash = $4 AND fingerprint_version = $5 \
                 AND ((state = 'in_progress' AND $10 AND coalesce(lease_expires_at, \
                 created_at + $9 * interval '1 millisecond') <= {now}) \
                 OR (state = 'failed' AND $11)) \
                 RETURNING fence, {lease_end}"
            ),
            renew: format!(
                "UPDATE {t} SET lease_expires_at = {now} + $6 * interval '1 millisecond', \
                 expires_at = greatest(expires_at, {now} + $6 * interval '1 millisecond') \
                 WHERE {held} RETURNING {lease_end}"
            ),
            complete: format!(
                "UPDATE {t} SET state = 'completed', status = $6, response_headers = $7, \
                 response = $8, replayable = $9, completed_at = {now}, \
                 lease_token = NULL, lease_expires_at = NULL WHERE {held}"
            ),
            fail: format!(
                "UPDATE {t} SET state = 'failed', completed_at = {now}, \
                 lease_token = NULL, lease_expires_at = NULL WHERE {held}"
            ),
            release: format!("DELETE FROM {t} WHERE {held}"),
            // The inner SELECT picks and locks a bounded batch, oldest first through the
            // expires_at index (a sequential scan would wade through the dead rows of the
            // batches before), skipping rows other transactions hold; the DELETE finds them
            // by ctid (a TID scan) and re-checks expiry, so a row re-acquired in between is
            // never deleted.
            purge: format!(
                "DELETE FROM {t} WHERE ctid = ANY(ARRAY(\
                 SELECT ctid FROM {t} WHERE expires_at <= {now} \
                 ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)) \
                 AND expires_at <= {now}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        for ok in ["idempotency_records", "_t", "idem_test_0123abcd", "a1"] {
            validate_identifier(ok).unwrap();
        }
        let long = "a".repeat(MAX_IDENTIFIER_BYTES + 1);
        for bad in ["", "1abc", "Idem", "a-b", "a b", "a\"b", "é", long.as_str()] {
            assert!(validate_identifier(bad).is_err(), "{bad:?} accepted");
        }
        assert!(validate_identifier(&"a".repeat(MAX_IDENTIFIER_BYTES)).is_ok());
    }

    #[test]
    fn qualified_names() {
        let plain = Table {
            schema: None,
            name: "t".into(),
        };
        assert_eq!(plain.qualified(), "\"t\"");
        assert_eq!(plain.migrations(), "\"t_migrations\"");
        let schema = Table {
            schema: Some("s".into()),
            name: "t".into(),
        };
        assert_eq!(schema.qualified(), "\"s\".\"t\"");
        assert_eq!(schema.display(), "s.t");
    }
}
