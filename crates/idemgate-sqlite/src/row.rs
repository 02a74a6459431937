//! Reading records: one `SELECT` of the live row, decoded into a [`RawRecord`] and checked
//! by [`RawRecord::validate`], the validation every store shares.

use bytes::Bytes;
use idemgate_core::{IdempotencyRecord, RawRecord, ScopedKey, UnixMillis};
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OptionalExtension, Row};

use crate::error::{invalid, Result};

/// The columns [`decode`] reads, in its order.
pub(crate) const RECORD_COLUMNS: &str = "fingerprint, fingerprint_version, state, fence,
    lease_token, lease_expires_at, status, response_headers, response_body, replayable,
    response_checksum, created_at, completed_at, expires_at, response_key_id";

/// The live row for a key: ?1 to ?3 the key, ?4 now. An expired row counts as absent, even
/// a damaged one; a row whose `expires_at` is not a number is read (and fails validation).
const SELECT_LIVE: &str = "SELECT fingerprint, fingerprint_version, state, fence, lease_token,
    lease_expires_at, status, response_headers, response_body, replayable, response_checksum,
    created_at, completed_at, expires_at, response_key_id
    FROM idempotency_records
    WHERE principal = ?1 AND route = ?2 AND key = ?3 AND expires_at > ?4";

/// The live record for `key` at `now` (an expired one reads as `None`), validated.
///
/// # Errors
/// [`crate::SqliteStoreError::Corrupt`] if the live row fails validation; a SQLite error.
pub(crate) fn read_live(
    conn: &Connection,
    key: &ScopedKey,
    now: UnixMillis,
) -> Result<Option<IdempotencyRecord>> {
    let raw = conn
        .prepare_cached(SELECT_LIVE)?
        .query_row(
            params![key.principal, key.route, key.key.as_str(), now],
            |row| decode(row, key),
        )
        .optional()?;
    raw.map(|raw| raw.validate().map_err(invalid)).transpose()
}

/// Fills a [`RawRecord`] from a [`SELECT_LIVE`] row: a NULL column, or one that does not
/// hold its type, is `None`, and the validation judges it.
pub(crate) fn decode(row: &Row<'_>, key: &ScopedKey) -> rusqlite::Result<RawRecord> {
    Ok(RawRecord {
        key: key.clone(),
        fingerprint_digest: blob(row, 0)?.map(<[u8]>::to_vec),
        fingerprint_version: int(row, 1)?,
        state: text(row, 2)?,
        fence: int(row, 3)?,
        lease_token: int(row, 4)?,
        lease_expires_at: int(row, 5)?,
        status: int(row, 6)?,
        headers: blob(row, 7)?.map(Bytes::copy_from_slice),
        body: blob(row, 8)?.map(Bytes::copy_from_slice),
        replayable: int(row, 9)?.and_then(|flag| match flag {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }),
        checksum: checksum(row, 10)?,
        created_at: int(row, 11)?,
        completed_at: int(row, 12)?,
        expires_at: int(row, 13)?,
        sealed_by: key_id(row, 14)?,
    })
}

fn int(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<i64>> {
    Ok(match row.get_ref(idx)? {
        ValueRef::Integer(i) => Some(i),
        _ => None,
    })
}

fn blob<'r>(row: &'r Row<'_>, idx: usize) -> rusqlite::Result<Option<&'r [u8]>> {
    Ok(match row.get_ref(idx)? {
        ValueRef::Blob(b) => Some(b),
        _ => None,
    })
}

/// The checksum: `None` only when NULL (a record from before checksums); a value of another
/// type is kept as an empty checksum, which never matches, so the record reads as corrupt
/// instead of passing as a record without one.
fn checksum(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<Vec<u8>>> {
    Ok(match row.get_ref(idx)? {
        ValueRef::Null => None,
        ValueRef::Blob(b) => Some(b.to_vec()),
        _ => Some(Vec::new()),
    })
}

/// The key id: `None` only when NULL (a response in clear); a value that is not text is
/// kept as an empty id, which never parses, so the record reads as corrupt.
fn key_id(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<String>> {
    Ok(match row.get_ref(idx)? {
        ValueRef::Null => None,
        ValueRef::Text(t) => Some(String::from_utf8_lossy(t).into_owned()),
        _ => Some(String::new()),
    })
}

fn text(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<String>> {
    Ok(match row.get_ref(idx)? {
        ValueRef::Text(t) => std::str::from_utf8(t).ok().map(str::to_owned),
        _ => None,
    })
}
