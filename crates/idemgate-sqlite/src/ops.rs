//! The SQL of each store operation. Every operation writes with one statement, prepared and
//! cached, that compare-and-sets on what the caller holds or saw; a failed statement never
//! leaves half an operation behind (SQLite undoes the statement, or the whole transaction,
//! which the worker detects). Reads are in [`crate::row`].

use std::time::Duration;

use bytes::Bytes;
use idemgate_core::record::duration_ms as millis;
use idemgate_core::{
    now_millis, response_checksum, IdempotencyRecord, InsertOutcome, InsertRequest, Lease,
    LeaseToken, StoredResponse, UnixMillis,
};
use rusqlite::{params, Connection, OptionalExtension, ToSql};

use crate::error::{Result, SqliteStoreError};
use crate::row::read_live;

/// Inserts a record `in_progress`, or replaces one past its `expires_at` (fence + 1, every
/// outcome column cleared); a live row is left alone and nothing is returned.
const INSERT: &str = "INSERT INTO idempotency_records (principal, route, key, fingerprint,
    fingerprint_version, state, fence, lease_token, lease_expires_at, created_at, expires_at)
    VALUES (?1, ?2, ?3, ?4, ?5, 'in_progress', 1, ?6, ?7, ?8, ?9)
    ON CONFLICT (principal, route, key) DO UPDATE SET
    fingerprint = excluded.fingerprint, fingerprint_version = excluded.fingerprint_version,
    state = 'in_progress', fence = fence + 1, lease_token = excluded.lease_token,
    lease_expires_at = excluded.lease_expires_at, status = NULL, response_headers = NULL,
    response_body = NULL, replayable = NULL, response_checksum = NULL,
    response_key_id = NULL, created_at = excluded.created_at, completed_at = NULL, expires_at = excluded.expires_at
    WHERE expires_at <= excluded.created_at
    RETURNING fence";

/// Inserts a record `in_progress` with fence 1 if the key has no row at all; a row of any
/// kind (live, or expired and waiting for [`INSERT`] to replace it) is left alone.
const INSERT_ABSENT: &str = "INSERT INTO idempotency_records (principal, route, key,
    fingerprint, fingerprint_version, state, fence, lease_token, lease_expires_at, created_at,
    expires_at)
    VALUES (?1, ?2, ?3, ?4, ?5, 'in_progress', 1, ?6, ?7, ?8, ?9)
    ON CONFLICT (principal, route, key) DO NOTHING";

/// Compare-and-set on a snapshot: ?4 fence, ?5 state, ?6 lease token and ?7 lease expiry as
/// read (`IS`: NULL equals NULL), live at ?10; the new lease is ?8 until ?9.
const TAKE_OVER: &str = "UPDATE idempotency_records SET state = 'in_progress',
    fence = fence + 1, lease_token = ?8, lease_expires_at = ?9, status = NULL,
    response_headers = NULL, response_body = NULL, replayable = NULL,
    response_checksum = NULL, response_key_id = NULL, completed_at = NULL,
    expires_at = MAX(expires_at, ?9)
    WHERE principal = ?1 AND route = ?2 AND key = ?3 AND fence = ?4 AND state = ?5
    AND lease_token IS ?6 AND lease_expires_at IS ?7 AND expires_at > ?10";

/// The compare-and-set every lease holder's write carries: live, `in_progress`, same fence
/// and token (whether or not the lease itself lapsed). Parameters ?1 to ?6.
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
     response_body = ?9, replayable = ?10, response_checksum = ?11, response_key_id = ?12",
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

/// A completion, prepared by the caller (headers encoded, checksum computed).
#[derive(Debug)]
pub(crate) struct Completion {
    status: u16,
    headers: Vec<u8>,
    /// Stored as a blob even when empty: a NULL body on a replayable record is corrupt.
    body: Bytes,
    replayable: bool,
    checksum: [u8; 32],
    /// The sealing key's id ([`idemgate_core::seal`]), `None` in clear.
    key_id: Option<String>,
}

impl Completion {
    /// What [`complete`] writes for `response` on `lease`'s record.
    pub(crate) fn new(lease: &Lease, response: &StoredResponse) -> Self {
        Self {
            status: response.status,
            headers: response.encode_headers(),
            body: response.body.clone(),
            replayable: response.replayable,
            checksum: response_checksum(&lease.key, response),
            key_id: response.sealed_by.map(|id| id.to_string()),
        }
    }
}

/// The clock readings of one insert (Unix ms): now, the lease's end and the record's expiry,
/// never before the lease's end.
struct InsertTimes {
    now: UnixMillis,
    lease_end: UnixMillis,
    expires_at: UnixMillis,
}

impl InsertTimes {
    fn of(req: &InsertRequest) -> Self {
        let now = now_millis();
        let lease_end = now.saturating_add(millis(req.lease_ttl));
        let expires_at = now.saturating_add(millis(req.record_ttl)).max(lease_end);
        Self {
            now,
            lease_end,
            expires_at,
        }
    }

    /// The lease `req` holds once its row is written with `fence`.
    fn lease(&self, req: &InsertRequest, fence: i64) -> Lease {
        Lease {
            key: req.key.clone(),
            fence,
            token: req.token,
            expires_at: self.lease_end,
        }
    }
}

/// Prepares `sql` (an insert with the parameters ?1 to ?9 of [`INSERT`]) and hands it to
/// `run` with `req`'s values bound as parameters, read at one clock reading.
fn with_insert<R>(
    conn: &Connection,
    sql: &str,
    req: &InsertRequest,
    run: impl FnOnce(&mut rusqlite::CachedStatement<'_>, &[&dyn rusqlite::ToSql]) -> rusqlite::Result<R>,
) -> Result<(R, InsertTimes)> {
    let t = InsertTimes::of(req);
    let k = &req.key;
    let mut stmt = conn.prepare_cached(sql)?;
    let out = run(
        &mut stmt,
        params![
            k.principal,
            k.route,
            k.key.as_str(),
            &req.fingerprint.digest[..],
            req.fingerprint.version,
            req.token.0,
            t.lease_end,
            t.now,
            t.expires_at
        ],
    )?;
    Ok((out, t))
}

/// The writer's authoritative insert-or-get: one statement inserts (or replaces an expired
/// row); only if a live row was there, a second one reads it. The worker runs this in a
/// `BEGIN IMMEDIATE` transaction, so that read sees the row the insert met.
pub(crate) fn insert_or_get(conn: &Connection, req: &InsertRequest) -> Result<InsertOutcome> {
    let (fence, t) = with_insert(conn, INSERT, req, |stmt, params| {
        stmt.query_row(params, |r| r.get::<_, i64>(0)).optional()
    })?;
    if let Some(fence) = fence {
        return Ok(InsertOutcome::Inserted(t.lease(req, fence)));
    }
    match read_live(conn, &req.key, t.now)? {
        Some(record) => Ok(InsertOutcome::Existing { record, now: t.now }),
        // The insert met a live row inside this transaction; it cannot be gone.
        None => Err(SqliteStoreError::Sqlite(
            rusqlite::Error::QueryReturnedNoRows,
        )),
    }
}

/// The insert of a key the read path just found without a live record: one statement,
/// no `RETURNING`, so a lone one runs in autocommit mode. `None` when a row is there (one
/// written since the read, or an expired one): then [`insert_or_get`] decides.
pub(crate) fn insert_absent(conn: &Connection, req: &InsertRequest) -> Result<Option<Lease>> {
    let (inserted, t) = with_insert(conn, INSERT_ABSENT, req, |stmt, params| {
        stmt.execute(params)
    })?;
    Ok((inserted == 1).then(|| t.lease(req, 1)))
}

/// Takes over `seen` if the row still matches it; `None` if it changed or is gone.
pub(crate) fn take_over(
    conn: &Connection,
    seen: &IdempotencyRecord,
    token: LeaseToken,
    lease_ttl: Duration,
) -> Result<Option<Lease>> {
    let now = now_millis();
    let lease_end = now.saturating_add(millis(lease_ttl));
    let k = &seen.key;
    let n = conn.prepare_cached(TAKE_OVER)?.execute(params![
        k.principal,
        k.route,
        k.key.as_str(),
        seen.fence,
        seen.state.as_str(),
        seen.lease_token.map(|t| t.0),
        seen.lease_expires_at,
        token.0,
        lease_end,
        now
    ])?;
    Ok((n == 1).then(|| Lease {
        key: k.clone(),
        fence: seen.fence + 1,
        token,
        expires_at: lease_end,
    }))
}

/// Runs `sql`, a lease holder's write (the compare-and-set of `held!`: ?1 to ?3 the key, ?4
/// fence, ?5 token, ?6 `now`), with `more` bound from ?7 on; `None` if the lease is stale.
fn held_write(
    conn: &Connection,
    sql: &str,
    lease: &Lease,
    now: UnixMillis,
    more: &[&dyn ToSql],
) -> Result<Option<()>> {
    let (k, token) = (&lease.key, lease.token.0);
    let key = k.key.as_str();
    let mut args: Vec<&dyn ToSql> = vec![&k.principal, &k.route, &key, &lease.fence, &token, &now];
    args.extend_from_slice(more);
    let n = conn.prepare_cached(sql)?.execute(args.as_slice())?;
    Ok((n == 1).then_some(()))
}

/// Extends a held lease, returning its new expiry; `None` if the lease is stale.
pub(crate) fn renew(conn: &Connection, lease: &Lease, ttl: Duration) -> Result<Option<UnixMillis>> {
    let now = now_millis();
    let until = now.saturating_add(millis(ttl));
    Ok(held_write(conn, RENEW, lease, now, &[&until])?.map(|()| until))
}

/// `in_progress` → `completed` with the response and its checksum; `None` if the lease is
/// stale.
pub(crate) fn complete(conn: &Connection, lease: &Lease, c: &Completion) -> Result<Option<()>> {
    let (body, checksum) = (&c.body[..], &c.checksum[..]);
    let more: [&dyn ToSql; 6] = [
        &c.status,
        &c.headers,
        &body,
        &c.replayable,
        &checksum,
        &c.key_id,
    ];
    held_write(conn, COMPLETE, lease, now_millis(), &more)
}

/// `in_progress` → `failed`; `None` if the lease is stale.
pub(crate) fn fail(conn: &Connection, lease: &Lease) -> Result<Option<()>> {
    held_write(conn, FAIL, lease, now_millis(), &[])
}

/// Deletes the held record; `None` if the lease is stale.
pub(crate) fn release(conn: &Connection, lease: &Lease) -> Result<Option<()>> {
    held_write(conn, RELEASE, lease, now_millis(), &[])
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
