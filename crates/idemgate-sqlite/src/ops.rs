//! The SQL of each store operation, run on the store thread's connection. Every operation
//! writes with at most one statement, so a failed statement never leaves half an operation
//! behind (SQLite undoes the statement, or the whole transaction, which the worker detects).

use bytes::Bytes;
use idemgate_core::engine::apply_acquire;
use idemgate_core::fingerprint::Fingerprint;
use idemgate_core::now_millis;
use idemgate_core::{
    AcquireOutcome, AcquireRequest, IdempotencyRecord, Lease, LeaseToken, RecordState, ScopedKey,
    StoredResponse, UnixMillis,
};
use rusqlite::types::{FromSql, ValueRef};
use rusqlite::{params, Connection, Row};

use crate::error::{corrupt, Result, SqliteStoreError};
use crate::SqliteStats;

const SELECT: &str = "SELECT fingerprint, fingerprint_version, state, fence, lease_token,
    lease_expires_at, status, response_headers, response_body, replayable, created_at,
    completed_at, expires_at
    FROM idempotency_records WHERE principal = ?1 AND route = ?2 AND key = ?3";

const UPSERT: &str = "INSERT INTO idempotency_records (principal, route, key, fingerprint,
    fingerprint_version, state, fence, lease_token, lease_expires_at, status, response_headers,
    response_body, replayable, created_at, completed_at, expires_at)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)
    ON CONFLICT (principal, route, key) DO UPDATE SET
    fingerprint = excluded.fingerprint, fingerprint_version = excluded.fingerprint_version,
    state = excluded.state, fence = excluded.fence, lease_token = excluded.lease_token,
    lease_expires_at = excluded.lease_expires_at, status = excluded.status,
    response_headers = excluded.response_headers, response_body = excluded.response_body,
    replayable = excluded.replayable, created_at = excluded.created_at,
    completed_at = excluded.completed_at, expires_at = excluded.expires_at";

/// The compare-and-set every lease holder's write carries: live, `in_progress`, same fence
/// and token. Parameters ?1 to ?6.
macro_rules! held {
    () => {
        " WHERE principal = ?1 AND route = ?2 AND key = ?3 AND state = 'in_progress'
          AND fence = ?4 AND lease_token = ?5 AND expires_at > ?6"
    };
}

const RENEW: &str = concat!(
    "UPDATE idempotency_records SET lease_expires_at = ?7, expires_at = MAX(expires_at, ?7)",
    held!()
);
const COMPLETE: &str = concat!(
    "UPDATE idempotency_records SET state = 'completed', completed_at = ?6,
     lease_token = NULL, lease_expires_at = NULL, status = ?7, response_headers = ?8,
     response_body = ?9, replayable = ?10",
    held!()
);
const FAIL: &str = concat!(
    "UPDATE idempotency_records SET state = 'failed', completed_at = ?6,
     lease_token = NULL, lease_expires_at = NULL",
    held!()
);
const RELEASE: &str = concat!("DELETE FROM idempotency_records", held!());

const PURGE: &str = "DELETE FROM idempotency_records WHERE rowid IN
    (SELECT rowid FROM idempotency_records WHERE expires_at <= ?1 LIMIT ?2)";

const STATS: &str = "SELECT count(*), total(length(response_body)), min(created_at),
    total(expires_at <= ?1),
    total(state = 'in_progress' AND expires_at > ?1
          AND (lease_expires_at IS NULL OR lease_expires_at <= ?1))
    FROM idempotency_records";

/// A completion, prepared by the caller (headers already encoded).
#[derive(Debug)]
pub(crate) struct Completion {
    pub(crate) status: u16,
    pub(crate) headers: Vec<u8>,
    pub(crate) body: Bytes,
    pub(crate) replayable: bool,
}

/// Reads the row, lets the engine decide, writes its verdict. The caller wraps this in a
/// `BEGIN IMMEDIATE` transaction, so the read and the write are one atomic step.
pub(crate) fn acquire(conn: &Connection, req: &AcquireRequest) -> Result<AcquireOutcome> {
    let now = now_millis();
    let current = read(conn, &req.key, now)?;
    let (row, outcome) = apply_acquire(current, req, now);
    if let Some(row) = row {
        write(conn, &row)?;
    }
    Ok(outcome)
}

/// Extends a held lease; `None` if the lease is stale.
pub(crate) fn renew(
    conn: &Connection,
    lease: &Lease,
    ttl: std::time::Duration,
) -> Result<Option<UnixMillis>> {
    let now = now_millis();
    let until = now.saturating_add(ttl.as_millis() as i64);
    let k = &lease.key;
    let n = conn.prepare_cached(RENEW)?.execute(params![
        k.principal,
        k.route,
        k.key.as_str(),
        lease.fence,
        lease.token.0,
        now,
        until
    ])?;
    Ok((n == 1).then_some(until))
}

/// `in_progress` → `completed`; false if the lease is stale.
pub(crate) fn complete(conn: &Connection, lease: &Lease, c: &Completion) -> Result<bool> {
    let k = &lease.key;
    let n = conn.prepare_cached(COMPLETE)?.execute(params![
        k.principal,
        k.route,
        k.key.as_str(),
        lease.fence,
        lease.token.0,
        now_millis(),
        c.status,
        c.headers,
        &c.body[..],
        c.replayable
    ])?;
    Ok(n == 1)
}

/// `in_progress` → `failed` (`sql` = [`FAIL`]) or deleted ([`RELEASE`]); false if stale.
fn held_write(conn: &Connection, sql: &str, lease: &Lease) -> Result<bool> {
    let k = &lease.key;
    let n = conn.prepare_cached(sql)?.execute(params![
        k.principal,
        k.route,
        k.key.as_str(),
        lease.fence,
        lease.token.0,
        now_millis()
    ])?;
    Ok(n == 1)
}

/// `in_progress` → `failed`; false if the lease is stale.
pub(crate) fn fail(conn: &Connection, lease: &Lease) -> Result<bool> {
    held_write(conn, FAIL, lease)
}

/// Deletes the held record; false if the lease is stale.
pub(crate) fn release(conn: &Connection, lease: &Lease) -> Result<bool> {
    held_write(conn, RELEASE, lease)
}

/// The live record for `key` (an expired one reads as `None`).
pub(crate) fn get(conn: &Connection, key: &ScopedKey) -> Result<Option<IdempotencyRecord>> {
    let now = now_millis();
    Ok(read(conn, key, now)?.filter(|r| now < r.expires_at))
}

/// Deletes at most `batch` expired records, returning how many.
pub(crate) fn purge(conn: &Connection, batch: u32) -> Result<u64> {
    let n = conn
        .prepare_cached(PURGE)?
        .execute(params![now_millis(), batch])?;
    Ok(n as u64)
}

/// A trivial query.
pub(crate) fn ping(conn: &Connection) -> Result<()> {
    conn.prepare_cached("SELECT 1")?.query_row([], |_| Ok(()))?;
    Ok(())
}

/// One scan of the table (see [`crate::SqliteStore::stats`]).
pub(crate) fn stats(conn: &Connection) -> Result<SqliteStats> {
    let now = now_millis();
    let stats = conn.prepare_cached(STATS)?.query_row([now], |r| {
        Ok(SqliteStats {
            rows: r.get::<_, i64>(0)? as u64,
            body_bytes: r.get::<_, f64>(1)? as u64,
            oldest_created_at: r.get(2)?,
            expired_rows: r.get::<_, f64>(3)? as u64,
            stuck_in_progress: r.get::<_, f64>(4)? as u64,
        })
    })?;
    Ok(stats)
}

// === rows ===

/// Reads the row for `key`, expired or not. A row that cannot be decoded is an error, unless
/// it has expired by `now`: an expired record counts as absent, so it reads as `None` (and
/// an acquire replaces it, as it would any expired record).
fn read(conn: &Connection, key: &ScopedKey, now: UnixMillis) -> Result<Option<IdempotencyRecord>> {
    let mut stmt = conn.prepare_cached(SELECT)?;
    let mut rows = stmt.query(params![key.principal, key.route, key.key.as_str()])?;
    let Some(row) = rows.next()? else {
        return Ok(None);
    };
    match decode(row, key) {
        Err(SqliteStoreError::Corrupt { .. })
            if col::<i64>(row, 12, "expires_at").is_ok_and(|at| at <= now) =>
        {
            Ok(None)
        }
        decoded => decoded.map(Some),
    }
}

/// Writes `r` whole (insert, or replace the row with the same key in place).
fn write(conn: &Connection, r: &IdempotencyRecord) -> Result<()> {
    let resp = r.response.as_ref();
    conn.prepare_cached(UPSERT)?.execute(params![
        r.key.principal,
        r.key.route,
        r.key.key.as_str(),
        &r.fingerprint.digest[..],
        r.fingerprint.version,
        r.state.as_str(),
        r.fence,
        r.lease_token.map(|t| t.0),
        r.lease_expires_at,
        resp.map(|p| p.status),
        resp.map(StoredResponse::encode_headers),
        resp.map(|p| &p.body[..]),
        resp.map(|p| p.replayable),
        r.created_at,
        r.completed_at,
        r.expires_at
    ])?;
    Ok(())
}

/// Reads column `idx` (named `name`), mapping a type mismatch to [`SqliteStoreError::Corrupt`].
fn col<T: FromSql>(row: &Row<'_>, idx: usize, name: &str) -> Result<T> {
    row.get(idx).map_err(|e| match e {
        rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::IntegralValueOutOfRange(..) => corrupt(name, e),
        e => SqliteStoreError::Sqlite(e),
    })
}

/// Reads a BLOB column without copying it; `None` for NULL.
fn blob<'r>(row: &'r Row<'_>, idx: usize, name: &str) -> Result<Option<&'r [u8]>> {
    match row.get_ref(idx)? {
        ValueRef::Null => Ok(None),
        ValueRef::Blob(b) => Ok(Some(b)),
        other => Err(corrupt(
            name,
            format_args!("expected a blob, found {:?}", other.data_type()),
        )),
    }
}

/// Decodes a [`SELECT`] row. Any column that does not decode is reported as corrupt.
fn decode(row: &Row<'_>, key: &ScopedKey) -> Result<IdempotencyRecord> {
    let digest = blob(row, 0, "fingerprint")?
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .ok_or_else(|| corrupt("fingerprint", "not 32 bytes"))?;
    let state: String = col(row, 2, "state")?;
    let state = RecordState::parse(&state)
        .ok_or_else(|| corrupt("state", format_args!("unknown state {state:?}")))?;
    let response = match state {
        RecordState::Completed => Some(decode_response(row)?),
        RecordState::InProgress | RecordState::Failed => None,
    };
    Ok(IdempotencyRecord {
        key: key.clone(),
        fingerprint: Fingerprint {
            version: col(row, 1, "fingerprint_version")?,
            digest,
        },
        state,
        fence: col(row, 3, "fence")?,
        lease_token: col::<Option<i64>>(row, 4, "lease_token")?.map(LeaseToken),
        lease_expires_at: col(row, 5, "lease_expires_at")?,
        created_at: col(row, 10, "created_at")?,
        completed_at: col(row, 11, "completed_at")?,
        expires_at: col(row, 12, "expires_at")?,
        response,
    })
}

/// The response columns of a `completed` row; all of them must be present, so a damaged
/// row is never replayed as an empty or partial response.
fn decode_response(row: &Row<'_>) -> Result<StoredResponse> {
    let missing = |name| corrupt(name, "missing in a completed record");
    let status: u16 = col::<Option<u16>>(row, 6, "status")?.ok_or_else(|| missing("status"))?;
    let headers = blob(row, 7, "response_headers")?.ok_or_else(|| missing("response_headers"))?;
    let headers =
        StoredResponse::decode_headers(headers).map_err(|e| corrupt("response_headers", e))?;
    let body = blob(row, 8, "response_body")?.ok_or_else(|| missing("response_body"))?;
    let replayable: bool =
        col::<Option<bool>>(row, 9, "replayable")?.ok_or_else(|| missing("replayable"))?;
    Ok(StoredResponse {
        status,
        headers,
        body: Bytes::copy_from_slice(body),
        replayable,
    })
}
