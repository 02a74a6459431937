//! Rows of the read statements ([`crate::sql::Statements::read`] and the read half of
//! [`crate::sql::Statements::insert_or_read`]) into the core's [`RawRecord`], and the lease
//! returned by a write.
//!
//! Every column is read as `Option<T>`: a NULL, or a value that does not decode as its type
//! (a column an operator altered), becomes `None`, and [`RawRecord::validate`] alone judges
//! whether the record is usable, so "corrupt" means here what it means on every store.

use bytes::Bytes;
use idemgate_core::{
    IdempotencyRecord, Lease, LeaseToken, RawRecord, ScopedKey, StoreError, UnixMillis,
};
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::error::{PostgresStoreError, Result};

/// One row of a read statement.
#[derive(Debug)]
pub(crate) struct ReadRow {
    /// The record as stored, not yet validated.
    pub(crate) raw: RawRecord,
    /// The database clock at the read, in ms since the epoch.
    pub(crate) now: UnixMillis,
}

impl ReadRow {
    /// True when the record is past its `expires_at` by the database clock (an unreadable
    /// expiry never expires: the record is then refused by validation instead).
    pub(crate) fn expired(&self) -> bool {
        self.raw.expires_at.is_some_and(|e| e <= self.now)
    }
}

/// `Some` when column `index` is non-NULL and decodes as `T`.
fn opt<'r, T>(row: &'r PgRow, index: usize) -> Option<T>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get::<Option<T>, _>(index).ok().flatten()
}

/// Decodes one row (column 0, `inserted`, is the caller's): the record's columns and the
/// database clock.
///
/// # Errors
/// Only if the clock (computed by the statement, never stored) does not decode; the
/// record's own columns never fail here.
pub(crate) fn decode(key: &ScopedKey, row: &PgRow) -> Result<ReadRow> {
    let fence: Option<i64> = opt(row, 4);
    let checksum_fence: Option<i64> = opt(row, 15);
    let checksum_current = checksum_fence.is_some() && checksum_fence == fence;
    let raw = RawRecord {
        key: key.clone(),
        fingerprint_digest: opt::<Vec<u8>>(row, 1),
        fingerprint_version: opt::<i32>(row, 2).map(i64::from),
        state: opt(row, 3),
        fence,
        lease_token: opt(row, 5),
        lease_expires_at: opt(row, 6),
        created_at: opt(row, 7),
        completed_at: opt(row, 8),
        expires_at: opt(row, 9),
        status: opt::<i32>(row, 10).map(i64::from),
        headers: opt::<Vec<u8>>(row, 11).map(Bytes::from),
        body: opt::<Vec<u8>>(row, 12).map(Bytes::from),
        replayable: opt(row, 13),
        // A checksum seals the response written at its fence. One left behind by a gateway
        // built before checksums, which replaced or took over the record (fence + 1) and
        // wrote another response, is stale: the record is then checked without it.
        checksum: opt::<Vec<u8>>(row, 14).filter(|_| checksum_current),
        // Sealed at the checksum's fence, and covered by it; left behind like it otherwise.
        // A value that is not text reads as an empty id, which never parses: corrupt.
        sealed_by: match row.try_get::<Option<String>, _>(17) {
            Ok(id) => id.filter(|_| checksum_current),
            Err(_) => Some(String::new()),
        },
    };
    Ok(ReadRow {
        raw,
        now: row.try_get(16)?,
    })
}

/// Columns of the fence and the lease end (ms) in a row `RETURNING fence, lease end ms`.
pub(crate) const RETURNED_LEASE: (usize, usize) = (0, 1);
/// Columns of the fence and the lease end (ms) in a read row.
pub(crate) const READ_LEASE: (usize, usize) = (4, 6);

/// The lease written with `token`, from the fence and lease-end `columns` of `row`.
///
/// # Errors
/// If those columns do not decode (they were just written by the statement).
pub(crate) fn lease(
    key: &ScopedKey,
    token: LeaseToken,
    row: &PgRow,
    (fence, end): (usize, usize),
) -> Result<Lease> {
    Ok(Lease {
        key: key.clone(),
        fence: row.try_get(fence)?,
        token,
        expires_at: row.try_get(end)?,
    })
}

/// [`RawRecord::validate`], with its error as this crate's.
///
/// # Errors
/// [`PostgresStoreError::Corrupt`] when the record fails validation.
pub(crate) fn validate(raw: RawRecord) -> Result<IdempotencyRecord> {
    raw.validate().map_err(|e| PostgresStoreError::Corrupt {
        detail: match e {
            StoreError::Corrupt { detail } => detail,
            other => other.to_string(),
        },
    })
}
