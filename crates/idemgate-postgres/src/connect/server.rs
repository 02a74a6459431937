//! What a server says about itself (recovery, system identifier, timeline) and what the
//! store remembers of it: the identity it first saw and the highest timeline.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use idemgate_core::report::error_text;
use sqlx::{Executor, PgConnection, Row};

use crate::error::{PostgresStoreError, Result};

/// The facts, in one round trip (simple protocol: nothing is prepared). The timeline is the
/// current WAL position's (a primary's; NULL on a standby, where it does not exist), not the
/// last checkpoint's, which lags a promotion.
const FACTS: &str = "SELECT pg_is_in_recovery(), \
     (SELECT system_identifier FROM pg_control_system()), \
     CASE WHEN pg_is_in_recovery() THEN NULL \
     ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END";

/// [`FACTS`] without the system identifier, for servers that deny `pg_control_system()`.
const FACTS_WITHOUT_ID: &str = "SELECT pg_is_in_recovery(), NULL::bigint, \
     CASE WHEN pg_is_in_recovery() THEN NULL \
     ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END";

/// What a server reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ServerFacts {
    /// `pg_is_in_recovery()`: a standby.
    pub(super) in_recovery: bool,
    /// `pg_control_system()`'s, as `pg_controldata` prints it; `None` when not readable.
    pub(super) system_identifier: Option<u64>,
    /// The timeline of the current WAL position; `None` on a standby.
    pub(super) timeline: Option<u32>,
}

/// Reads the facts of the server on `conn`, with its system identifier if `with_id`.
pub(super) async fn read_facts(
    conn: &mut PgConnection,
    with_id: bool,
) -> Result<ServerFacts, sqlx::Error> {
    let sql = if with_id { FACTS } else { FACTS_WITHOUT_ID };
    let row = conn.fetch_one(sqlx::raw_sql(sql)).await?;
    let timeline: Option<String> = row.try_get(2)?;
    Ok(ServerFacts {
        in_recovery: row.try_get(0)?,
        // A bigint in SQL: the same 64 bits as pg_controldata's unsigned number.
        system_identifier: row.try_get::<Option<i64>, _>(1)?.map(|id| id as u64),
        timeline: timeline.and_then(|t| u32::from_str_radix(&t, 16).ok()),
    })
}

/// Whether `e` is `insufficient_privilege` (SQLSTATE 42501).
pub(super) fn permission_denied(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some("42501"))
}

/// Whether connecting failed in a way worth waiting out, as the pool does: connection
/// refused, or the server starting up or full (57P03, 53300).
pub(super) fn is_unreachable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(e) => e.kind() == io::ErrorKind::ConnectionRefused,
        sqlx::Error::Database(db) => matches!(db.code().as_deref(), Some("57P03" | "53300")),
        _ => false,
    }
}

/// The error of a probe that got no answer within `timeout`.
pub(super) fn timed_out(timeout: Duration) -> sqlx::Error {
    let message = format!("no answer within {} ms", timeout.as_millis());
    sqlx::Error::Io(io::Error::new(io::ErrorKind::TimedOut, message))
}

/// What the store remembers of the servers it connected to.
#[derive(Debug, Default)]
pub(super) struct Seen {
    /// The first system identifier seen: every later server must have it.
    pub(super) system_identifier: Option<u64>,
    /// The highest timeline seen.
    pub(super) timeline: Option<u32>,
    /// The server denied `pg_control_system()`: the identity check is skipped.
    pub(super) id_unreadable: bool,
    /// Why the last new connection was refused, until one is accepted.
    pub(super) refusal: Option<Arc<PostgresStoreError>>,
}

impl Seen {
    /// What a store remembers before its first connection: the identity a forward journal
    /// recorded (nothing without one).
    pub(super) fn recorded(identity: crate::journal::Identity) -> Self {
        Self {
            system_identifier: identity.system_identifier,
            timeline: identity.timeline,
            ..Self::default()
        }
    }

    /// Whether the server `host` with `facts` is this store's database, on a timeline not
    /// behind the highest seen.
    ///
    /// # Errors
    /// [`PostgresStoreError::OtherDatabase`] or [`PostgresStoreError::TimelineBehind`].
    pub(super) fn judge(&self, host: &str, facts: &ServerFacts) -> Result<()> {
        if let (Some(expected), Some(found)) = (self.system_identifier, facts.system_identifier) {
            if expected != found {
                let host = host.to_owned();
                return Err(PostgresStoreError::OtherDatabase {
                    host,
                    expected,
                    found,
                });
            }
        }
        if let (Some(seen), Some(found)) = (self.timeline, facts.timeline) {
            if found < seen {
                let host = host.to_owned();
                return Err(PostgresStoreError::TimelineBehind { host, seen, found });
            }
        }
        Ok(())
    }

    /// [`Seen::judge`], then records the facts: the first system identifier, and a higher
    /// timeline, which is a failover (logged and counted in
    /// `idempotency_store_failovers_total{backend="postgres"}`). Returns whether it was one.
    ///
    /// # Errors
    /// As [`Seen::judge`]; nothing is recorded then.
    pub(super) fn observe(&mut self, host: &str, facts: &ServerFacts) -> Result<bool> {
        self.judge(host, facts)?;
        if self.system_identifier.is_none() {
            self.system_identifier = facts.system_identifier;
        }
        let Some(found) = facts.timeline else {
            return Ok(false);
        };
        let failover = self.timeline.is_some_and(|seen| found > seen);
        if let Some(seen) = self.timeline.filter(|_| failover) {
            tracing::warn!(%host, from = seen, to = found, "PostgreSQL store: failover, the primary's timeline rose");
            metrics::counter!("idempotency_store_failovers_total", "backend" => "postgres")
                .increment(1);
        }
        self.timeline = Some(found);
        Ok(failover)
    }

    /// Skips the identity check from now on, logging why once.
    pub(super) fn mark_id_unreadable(&mut self, e: &sqlx::Error) {
        if !self.id_unreadable {
            self.id_unreadable = true;
            tracing::warn!(error = %error_text(e), "PostgreSQL store: the system identifier is not readable (pg_control_system() denied); connections are not checked to be the same database");
        }
    }

    /// Keeps `e` as the last refusal, logging it when the reason changed.
    pub(super) fn refuse(&mut self, e: Arc<PostgresStoreError>) {
        let text = error_text(&*e);
        if self.refusal.as_deref().map(|r| error_text(r)) != Some(text.clone()) {
            tracing::error!(error = %text, "PostgreSQL store: a new connection was refused");
        }
        self.refusal = Some(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn primary(id: u64, timeline: u32) -> ServerFacts {
        ServerFacts {
            in_recovery: false,
            system_identifier: Some(id),
            timeline: Some(timeline),
        }
    }

    #[test]
    fn the_first_identity_stays_and_timelines_only_rise() {
        let mut seen = Seen::default();
        assert!(!seen.observe("a:1", &primary(7, 1)).unwrap());
        assert_eq!((seen.system_identifier, seen.timeline), (Some(7), Some(1)));
        let err = seen.observe("b:2", &primary(8, 1)).unwrap_err();
        assert!(matches!(
            err,
            PostgresStoreError::OtherDatabase {
                expected: 7,
                found: 8,
                ..
            }
        ));
        assert!(err.to_string().contains("system identifier 8"), "{err}");
        assert!(seen.observe("b:2", &primary(7, 3)).unwrap());
        assert_eq!(seen.timeline, Some(3));
        let err = seen.observe("a:1", &primary(7, 2)).unwrap_err();
        assert!(matches!(
            err,
            PostgresStoreError::TimelineBehind {
                seen: 3,
                found: 2,
                ..
            }
        ));
        assert_eq!(seen.timeline, Some(3));
    }

    #[test]
    fn unknown_facts_are_not_checked() {
        let mut seen = Seen::default();
        let unreadable = ServerFacts {
            in_recovery: false,
            system_identifier: None,
            timeline: Some(2),
        };
        assert!(!seen.observe("a:1", &unreadable).unwrap());
        assert!(!seen.observe("a:1", &primary(9, 2)).unwrap());
        assert_eq!(seen.system_identifier, Some(9));
    }
}
