//! Table names and the SQL text of every statement, built once per table.
//!
//! Every time is judged by the database clock: [`NOW`] is `statement_timestamp()` (the same
//! value throughout one statement, equal to `now()` outside an explicit transaction and still
//! current inside a caller's long transaction), truncated to milliseconds so the SQL
//! comparisons and the records read back (times in ms) agree to the millisecond.

use crate::error::PostgresStoreError;

/// The default table name.
pub(crate) const DEFAULT_TABLE: &str = "idempotency_records";

/// Longest accepted identifier, in bytes: PostgreSQL's limit is 63, and the longest derived
/// name (`<table>_completed_status_check`) adds 23 (one byte to spare).
pub(crate) const MAX_IDENTIFIER_BYTES: usize = 39;

/// The database clock, truncated to milliseconds.
pub(crate) const NOW: &str = "date_trunc('milliseconds', statement_timestamp())";

/// `expr` (a `timestamptz`) as ms since the epoch (`bigint`); NULL stays NULL.
pub(crate) fn ms(expr: &str) -> String {
    format!("(extract(epoch from {expr}) * 1000)::bigint")
}

/// Checks that `name` is a plain identifier: 1 to [`MAX_IDENTIFIER_BYTES`] bytes of `a-z`,
/// `0-9` and `_`, not starting with a digit. Lower case only, so the quoted name used by the
/// store and the unquoted name an operator types in `psql` are the same table.
pub(crate) fn validate_identifier(name: &str) -> Result<(), PostgresStoreError> {
    let reason = if name.is_empty() {
        "empty"
    } else if name.len() > MAX_IDENTIFIER_BYTES {
        "longer than 39 bytes"
    } else if name.starts_with(|c: char| c.is_ascii_digit()) {
        "starts with a digit"
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        "only a-z, 0-9 and _ are allowed"
    } else {
        return Ok(());
    };
    Err(PostgresStoreError::InvalidIdentifier {
        name: name.to_owned(),
        reason,
    })
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

    /// The quoted, schema-qualified name of the failovers table (`<table>_failovers`): the
    /// first detection of each timeline, for the forward journal's grace.
    pub(crate) fn failovers(&self) -> String {
        self.qualify(&format!("{}_failovers", self.name))
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

/// The columns every read returns, in [`crate::row`]'s order: the record's columns (times
/// in ms), the database clock, then the key id. Preceded by `inserted` (a boolean) in every
/// statement.
pub(crate) fn record_columns() -> String {
    format!(
        "request_hash, fingerprint_version, state, fence, lease_token, {} AS lease_end_ms, \
         {} AS created_ms, {} AS completed_ms, {} AS expires_ms, status, response_headers, \
         response, replayable, response_checksum, response_checksum_fence, {} AS now_ms, \
         response_key_id",
        ms("lease_expires_at"),
        ms("created_at"),
        ms("completed_at"),
        ms("expires_at"),
        ms(NOW),
    )
}

/// The text of every statement the store runs against one table. sqlx prepares each one
/// once per connection and reuses it. Every write is a compare-and-set on what the caller
/// holds or read; none of them holds a rule of the engine.
#[derive(Debug)]
pub(crate) struct Statements {
    /// `$1..$3` key, `$4` digest, `$5` fp version, `$6` token, `$7` lease ms, `$8` ttl ms.
    /// Returns the record when the key exists in the statement's snapshot, else inserts it:
    /// one row of `inserted` + [`record_columns`], or no row when a concurrent insert won
    /// after the snapshot was taken (then [`Statements::read`] in a separate statement).
    pub(crate) insert_or_read: String,
    /// `$1..$3` key. `false` + [`record_columns`].
    pub(crate) read: String,
    /// [`Statements::insert_or_read`]'s parameters, `$9` the fence read. Replaces a record
    /// past its `expires_at` that still has that fence. Returns `(fence, lease end ms)`.
    pub(crate) replace_expired: String,
    /// `$1..$3` key, `$4` token, `$5` lease ms; the snapshot: `$6` fence, `$7` state, `$8`
    /// lease token, `$9` lease end ms. Returns `(fence, lease end ms)`.
    pub(crate) take_over: String,
    /// CAS on `$1..$3` key, `$4` fence, `$5` token; `$6` lease ms. Returns the new expiry.
    pub(crate) renew: String,
    /// CAS as renew; `$6` status, `$7` headers, `$8` body, `$9` replayable, `$10` checksum,
    /// `$11` key id.
    pub(crate) complete: String,
    /// CAS as renew.
    pub(crate) fail: String,
    /// CAS as renew.
    pub(crate) release: String,
    /// `$1` batch size.
    pub(crate) purge: String,
}

/// `SET` clause that clears the stored response, its checksum and its key id.
const NO_RESPONSE: &str = "status = NULL, response_headers = NULL, response = NULL, \
     replayable = NULL, response_checksum = NULL, response_checksum_fence = NULL, \
     response_key_id = NULL";

impl Statements {
    pub(crate) fn new(table: &Table) -> Self {
        let t = table.qualified();
        let now = NOW;
        let lease_end = ms("lease_expires_at");
        let cols = record_columns();
        let key = "user_id = $1 AND route = $2 AND key = $3";
        let lease = |p: u8| format!("{now} + ${p} * interval '1 millisecond'");
        // The holder's compare-and-set: the lease's fence and token on a live record. The
        // lease's own expiry is not checked: a late outcome of a live fence lands.
        let held = format!(
            "{key} AND state = 'in_progress' AND fence = $4 AND lease_token = $5 \
             AND expires_at > {now}"
        );
        Self {
            // Both halves see the statement's snapshot. A key found there is returned and
            // the insert is not even attempted: a replay is one round trip that writes and
            // waits for nothing, even while a caller's open transaction holds the row. A key
            // committed by another transaction after the snapshot makes the insert do
            // nothing: no row, and the caller reads again in a new statement.
            insert_or_read: format!(
                "WITH found AS (SELECT {cols} FROM {t} WHERE {key}), \
                 ins AS (INSERT INTO {t} (user_id, route, key, request_hash, \
                 fingerprint_version, state, fence, lease_token, lease_expires_at, created_at, \
                 expires_at) SELECT $1, $2, $3, $4, $5, 'in_progress', 1, $6, {}, {now}, \
                 {now} + greatest($8, $7) * interval '1 millisecond' \
                 WHERE NOT EXISTS (SELECT 1 FROM found) \
                 ON CONFLICT (user_id, route, key) DO NOTHING RETURNING {cols}) \
                 SELECT true, * FROM ins UNION ALL SELECT false, * FROM found",
                lease(7),
            ),
            read: format!("SELECT false, {cols} FROM {t} WHERE {key}"),
            replace_expired: format!(
                "UPDATE {t} SET request_hash = $4, fingerprint_version = $5, \
                 state = 'in_progress', fence = fence + 1, lease_token = $6, \
                 lease_expires_at = {}, created_at = {now}, completed_at = NULL, \
                 expires_at = {now} + greatest($8, $7) * interval '1 millisecond', \
                 {NO_RESPONSE} WHERE {key} AND fence = $9 AND expires_at <= {now} \
                 RETURNING fence, {lease_end}",
                lease(7),
            ),
            take_over: format!(
                "UPDATE {t} SET state = 'in_progress', fence = fence + 1, lease_token = $4, \
                 lease_expires_at = {l}, expires_at = greatest(expires_at, {l}), \
                 completed_at = NULL, {NO_RESPONSE} WHERE {key} AND fence = $6 AND state = $7 \
                 AND lease_token IS NOT DISTINCT FROM $8 \
                 AND {lease_end} IS NOT DISTINCT FROM $9 AND expires_at > {now} \
                 RETURNING fence, {lease_end}",
                l = lease(5),
            ),
            renew: format!(
                "UPDATE {t} SET lease_expires_at = {l}, expires_at = greatest(expires_at, {l}) \
                 WHERE {held} RETURNING {lease_end}",
                l = lease(6),
            ),
            complete: format!(
                "UPDATE {t} SET state = 'completed', status = $6, response_headers = $7, \
                 response = $8, replayable = $9, response_checksum = $10, \
                 response_checksum_fence = fence, response_key_id = $11, completed_at = {now}, \
                 lease_token = NULL, lease_expires_at = NULL WHERE {held}"
            ),
            fail: format!(
                "UPDATE {t} SET state = 'failed', {NO_RESPONSE}, completed_at = {now}, \
                 lease_token = NULL, lease_expires_at = NULL WHERE {held}"
            ),
            release: format!("DELETE FROM {t} WHERE {held}"),
            // The inner SELECT picks and locks a bounded batch, oldest first through the
            // expires_at index (a sequential scan would wade through the dead rows of the
            // batches before), skipping rows other transactions hold; the DELETE finds them
            // by ctid (a TID scan) and re-checks expiry, so a row re-inserted in between is
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
