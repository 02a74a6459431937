//! [`JournalFile`]: the forward journal's local SQLite file, held by one process at a time.
//!
//! Two tables: `meta` (the system identifier and the highest timeline of the database the
//! entries were written against) and `entries` (one row per key this process acquired and
//! has not yet seen replicated). The file runs in WAL mode with `synchronous = FULL` (an
//! entry is on disk before its key is forwarded) and `locking_mode = EXCLUSIVE`: the first
//! write takes the lock for the life of the connection, so a second process opening the
//! same file fails at once instead of sharing it.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use idemgate_core::fingerprint::Fingerprint;
use idemgate_core::{IdempotencyKey, Lease, LeaseToken, RecordState, ScopedKey, StoredResponse};
use rusqlite::{params, Connection, OptionalExtension, Row};

/// How long opening waits for a lock held by another process before it fails.
const BUSY_TIMEOUT: Duration = Duration::from_millis(200);

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    principal TEXT NOT NULL, route TEXT NOT NULL, key TEXT NOT NULL,
    fence INTEGER NOT NULL, token INTEGER NOT NULL,
    fingerprint_version INTEGER NOT NULL, fingerprint BLOB NOT NULL,
    state TEXT NOT NULL, status INTEGER, headers BLOB, body BLOB, replayable INTEGER,
    lease_ttl_ms INTEGER NOT NULL, expires_at_ms INTEGER NOT NULL,
    run INTEGER NOT NULL, seq INTEGER NOT NULL, written_ms INTEGER NOT NULL,
    PRIMARY KEY (principal, route, key)
);
CREATE INDEX IF NOT EXISTS entries_seq ON entries (seq);
";

/// The column a journal file from before sealing lacks: the key id of a sealed response
/// ([`idemgate_core::seal`]), NULL in clear.
const KEY_ID_COLUMN: &str = "ALTER TABLE entries ADD COLUMN key_id TEXT";

/// Adds [`KEY_ID_COLUMN`] to a journal file that lacks it.
fn add_key_id(conn: &Connection) -> rusqlite::Result<()> {
    let has: bool = conn.query_row(
        "SELECT count(*) > 0 FROM pragma_table_info('entries') WHERE name = 'key_id'",
        [],
        |r| r.get(0),
    )?;
    if !has {
        conn.execute(KEY_ID_COLUMN, [])?;
    }
    Ok(())
}

/// One acquired key as the journal keeps it: enough to write its record again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) key: ScopedKey,
    pub(crate) fence: i64,
    pub(crate) token: LeaseToken,
    pub(crate) fingerprint: Fingerprint,
    pub(crate) state: RecordState,
    /// The outcome, once `completed`.
    pub(crate) response: Option<StoredResponse>,
    /// The lease's length, for a lease restored live.
    pub(crate) lease_ttl_ms: i64,
    /// When the record expires, ms since the epoch (the store's clock at the acquire).
    pub(crate) expires_at_ms: i64,
    /// The process run that wrote it ([`JournalFile::open`]'s run number).
    pub(crate) run: i64,
}

/// What the journal remembers of the database.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) system_identifier: Option<u64>,
    pub(crate) timeline: Option<u32>,
}

/// The open journal file. Not `Sync`: [`super::Journal`] keeps it behind a mutex and calls
/// it from blocking tasks.
pub(crate) struct JournalFile {
    conn: Connection,
    /// The sequence number of the next write.
    next_seq: i64,
    /// This run's number (one more than the last run's).
    pub(crate) run: i64,
}

impl JournalFile {
    /// Opens (creating) the file at `path`, takes its lock and starts a new run.
    ///
    /// # Errors
    /// A message naming the file: it cannot be created or read, it is not a journal, or
    /// another process holds it.
    pub(crate) fn open(path: &Path) -> Result<Self, String> {
        let name = path.display();
        let fail = |e: rusqlite::Error| match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
                format!("{name} is in use by another process (one journal per process)")
            }
            _ => format!("{name}: {e}"),
        };
        let conn = Connection::open(path).map_err(fail)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(fail)?;
        conn.pragma_update(None, "locking_mode", "EXCLUSIVE")
            .map_err(fail)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(fail)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(fail)?;
        conn.execute_batch(SCHEMA).map_err(fail)?;
        add_key_id(&conn).map_err(fail)?;
        let run = meta(&conn, "run").map_err(fail)?.unwrap_or(0) + 1;
        set_meta(&conn, "run", run).map_err(fail)?;
        let next_seq: i64 = conn
            .query_row("SELECT coalesce(max(seq), 0) + 1 FROM entries", [], |r| {
                r.get(0)
            })
            .map_err(fail)?;
        Ok(Self {
            conn,
            next_seq,
            run,
        })
    }

    /// Begins a transaction (taking the write lock).
    pub(crate) fn begin(&self) -> rusqlite::Result<()> {
        self.conn.execute_batch("BEGIN IMMEDIATE")
    }

    /// Commits the transaction [`JournalFile::begin`] began (one fsync).
    pub(crate) fn commit(&self) -> rusqlite::Result<()> {
        self.conn.execute_batch("COMMIT")
    }

    /// The sequence number the next write gets: every entry written so far has a lower one.
    pub(crate) fn next_seq(&self) -> i64 {
        self.next_seq
    }

    /// The identity recorded with the entries.
    pub(crate) fn identity(&self) -> rusqlite::Result<Identity> {
        Ok(Identity {
            system_identifier: meta(&self.conn, "system_identifier")?.map(|id| id as u64),
            timeline: meta(&self.conn, "timeline")?.and_then(|t| u32::try_from(t).ok()),
        })
    }

    /// Records the database's identity (each part only when known).
    pub(crate) fn set_identity(&self, identity: Identity) -> rusqlite::Result<()> {
        if let Some(id) = identity.system_identifier {
            // The same 64 bits, stored as SQLite's signed integer.
            set_meta(&self.conn, "system_identifier", id as i64)?;
        }
        if let Some(timeline) = identity.timeline {
            set_meta(&self.conn, "timeline", i64::from(timeline))?;
        }
        Ok(())
    }

    /// Writes `entry`, replacing the key's earlier one, at `written_ms` (local clock).
    pub(crate) fn put(&mut self, entry: &Entry, written_ms: i64) -> rusqlite::Result<()> {
        let response = entry.response.as_ref();
        let seq = self.take_seq();
        self.conn.execute(
            "INSERT OR REPLACE INTO entries VALUES \
             (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
            params![
                entry.key.principal,
                entry.key.route,
                entry.key.key.as_str(),
                entry.fence,
                entry.token.0,
                entry.fingerprint.version,
                &entry.fingerprint.digest[..],
                entry.state.as_str(),
                response.map(|r| r.status),
                response.map(StoredResponse::encode_headers),
                response.map(|r| r.body.to_vec()),
                response.map(|r| r.replayable),
                entry.lease_ttl_ms,
                entry.expires_at_ms,
                entry.run,
                seq,
                written_ms,
                response.and_then(|r| r.sealed_by.map(|id| id.to_string())),
            ],
        )?;
        Ok(())
    }

    /// Records the outcome of `lease`'s entry (`completed` with `response`, or `failed`);
    /// false when the journal holds no such entry. The entry must be that lease's, token
    /// included: the key may have been acquired again at the same fence since (after a
    /// release), and a late write of the earlier lease must not touch the new entry.
    pub(crate) fn outcome(
        &mut self,
        lease: &Lease,
        response: Option<&StoredResponse>,
    ) -> rusqlite::Result<bool> {
        let key = &lease.key;
        let state = match response {
            Some(_) => RecordState::Completed,
            None => RecordState::Failed,
        };
        let seq = self.take_seq();
        let changed = self.conn.execute(
            "UPDATE entries SET state = ?5, status = ?6, headers = ?7, body = ?8, \
             replayable = ?9, seq = ?10, key_id = ?11 \
             WHERE principal = ?1 AND route = ?2 AND key = ?3 AND fence = ?4 AND token = ?12",
            params![
                key.principal,
                key.route,
                key.key.as_str(),
                lease.fence,
                state.as_str(),
                response.map(|r| r.status),
                response.map(StoredResponse::encode_headers),
                response.map(|r| r.body.to_vec()),
                response.map(|r| r.replayable),
                seq,
                response.and_then(|r| r.sealed_by.map(|id| id.to_string())),
                lease.token.0,
            ],
        )?;
        Ok(changed > 0)
    }

    /// Deletes `lease`'s entry (its record was released), token included, as
    /// [`JournalFile::outcome`]: a release retried after its answer was lost finds the lease
    /// gone (`LeaseLost`) and must not delete the entry of the key's next acquire.
    pub(crate) fn remove(&self, lease: &Lease) -> rusqlite::Result<()> {
        let key = &lease.key;
        self.conn.execute(
            "DELETE FROM entries \
             WHERE principal = ?1 AND route = ?2 AND key = ?3 AND fence = ?4 AND token = ?5",
            params![
                key.principal,
                key.route,
                key.key.as_str(),
                lease.fence,
                lease.token.0
            ],
        )?;
        Ok(())
    }

    /// Deletes the entries with an outcome written before sequence number `seq`: a standby
    /// has replayed them. Returns how many.
    pub(crate) fn drop_confirmed(&self, seq: i64) -> rusqlite::Result<usize> {
        self.conn.execute(
            "DELETE FROM entries WHERE seq < ?1 AND state <> 'in_progress'",
            [seq],
        )
    }

    /// Deletes the entries written before `before_ms` (local clock). Returns how many.
    pub(crate) fn drop_older(&self, before_ms: i64) -> rusqlite::Result<usize> {
        self.conn
            .execute("DELETE FROM entries WHERE written_ms < ?1", [before_ms])
    }

    /// Every entry, oldest write first.
    pub(crate) fn entries(&self) -> rusqlite::Result<Vec<Entry>> {
        let mut stmt = self.conn.prepare(
            "SELECT principal, route, key, fence, token, fingerprint_version, fingerprint, \
             state, status, headers, body, replayable, lease_ttl_ms, expires_at_ms, run, \
             key_id FROM entries ORDER BY seq",
        )?;
        let rows = stmt.query_map([], decode)?;
        rows.collect()
    }

    /// How many entries the journal holds.
    pub(crate) fn len(&self) -> rusqlite::Result<u64> {
        self.conn
            .query_row("SELECT count(*) FROM entries", [], |r| r.get(0))
    }

    fn take_seq(&mut self) -> i64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }
}

fn meta(conn: &Connection, name: &str) -> rusqlite::Result<Option<i64>> {
    conn.query_row("SELECT value FROM meta WHERE name = ?1", [name], |r| {
        r.get(0)
    })
    .optional()
}

fn set_meta(conn: &Connection, name: &str, value: i64) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO meta (name, value) VALUES (?1, ?2) \
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        params![name, value],
    )?;
    Ok(())
}

/// An entry from its row; a row that does not decode is an error (never half an entry).
fn decode(row: &Row<'_>) -> rusqlite::Result<Entry> {
    let bad = |i: usize, what: String| {
        let e: Box<dyn std::error::Error + Send + Sync> = what.into();
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, e)
    };
    let key: String = row.get(2)?;
    let key = IdempotencyKey::new(&key).map_err(|e| bad(2, e.to_string()))?;
    let digest: Vec<u8> = row.get(6)?;
    let digest = digest
        .try_into()
        .map_err(|_| bad(6, "a fingerprint is 32 bytes".into()))?;
    let state: String = row.get(7)?;
    let state = match state.as_str() {
        "in_progress" => RecordState::InProgress,
        "completed" => RecordState::Completed,
        "failed" => RecordState::Failed,
        other => return Err(bad(7, format!("unknown state {other:?}"))),
    };
    let response = match row.get::<_, Option<u16>>(8)? {
        Some(status) => {
            let headers: Vec<u8> = row.get(9)?;
            let body: Vec<u8> = row.get(10)?;
            Some(StoredResponse {
                status,
                headers: StoredResponse::decode_headers(&headers).map_err(|e| bad(9, e))?,
                body: Bytes::from(body),
                replayable: row.get(11)?,
                sealed_by: match row.get::<_, Option<String>>(15)? {
                    Some(id) => Some(id.parse().map_err(|e| bad(15, e))?),
                    None => None,
                },
            })
        }
        None => None,
    };
    Ok(Entry {
        key: ScopedKey {
            principal: row.get(0)?,
            route: row.get(1)?,
            key,
        },
        fence: row.get(3)?,
        token: LeaseToken(row.get(4)?),
        fingerprint: Fingerprint {
            version: row.get(5)?,
            digest,
        },
        state,
        response,
        lease_ttl_ms: row.get(12)?,
        expires_at_ms: row.get(13)?,
        run: row.get(14)?,
    })
}

#[cfg(test)]
mod tests;
