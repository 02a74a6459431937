//! [`idemgate_core::gauges::GaugedStore::durability`] for [`PostgresStore`]: what a crash or a failover can lose,
//! read from the server's settings (`fsync`, `synchronous_commit`,
//! `synchronous_standby_names`) and its standbys (`pg_stat_replication`), in one statement
//! (plus one for the system identifier when `pg_control_system()` may be called).
//!
//! The same read tells whether a store with
//! [`crate::PostgresOptions::with_require_synchronous_replication`] refuses new keys
//! ([`refusal`], `sync.rs`); [`confirm`] waits until the standbys have a write.

use std::time::Duration;

use idemgate_core::durability::{Durability, DurabilityLevel};
use sqlx::postgres::PgRow;
use sqlx::{Executor, PgConnection, Row};
use tokio::time::Instant;

use crate::error::Result;
use crate::store::PostgresStore;
use crate::sync::SyncGuard;

/// What a column reads as when the store's role may not see it.
const UNREADABLE: &str = "not readable (needs pg_monitor)";

/// One round trip: the settings, the timeline, the standbys and the commits waiting on one.
/// `$1` is [`UNREADABLE`]. A standby is `lagging` when it has flushed less WAL than the
/// primary and sent no reply for over a second (a stalled WAL receiver keeps its
/// `streaming` state until `wal_sender_timeout`).
const READ_SQL: &str = "WITH r AS (SELECT *, CASE WHEN pg_is_in_recovery() THEN false \
     ELSE coalesce(flush_lsn < pg_current_wal_flush_lsn() \
     AND clock_timestamp() - reply_time > interval '1 second', false) END AS lagging \
     FROM pg_stat_replication) \
     SELECT current_setting('synchronous_commit'), current_setting('synchronous_standby_names'), \
     current_setting('fsync'), pg_is_in_recovery(), \
     CASE WHEN pg_is_in_recovery() THEN NULL \
     ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END, \
     has_function_privilege('pg_control_system()', 'EXECUTE'), \
     coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false) \
     OR pg_has_role(current_user, 'pg_read_all_stats', 'USAGE'), \
     ARRAY(SELECT coalesce(application_name, 'pid ' || pid) FROM r ORDER BY pid), \
     ARRAY(SELECT format('state=%s, sync_state=%s, flush_lsn=%s, replay_lsn=%s', \
     coalesce(state, $1), coalesce(sync_state, $1), coalesce(flush_lsn::text, $1), \
     coalesce(replay_lsn::text, $1)) FROM r ORDER BY pid), \
     (SELECT count(*) FROM r WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum'))::int4, \
     (SELECT count(*) FROM r WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum') \
     AND NOT lagging)::int4, \
     (SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' \
     AND datname = current_database() AND usename = current_user \
     AND clock_timestamp() - query_start > interval '1 second')::int4";

/// How often an unconfirmed write polls the standbys' positions.
const POLL: Duration = Duration::from_millis(5);
/// `$1` the position to reach, or NULL for the primary's flushed WAL position now. Counts the
/// `sync` and `quorum` standbys that flushed it (applied it, under `remote_apply`). Reads
/// the WAL senders' function that `pg_stat_replication` is built on, without that view's
/// join to every backend's activity.
const CONFIRM_SQL: &str = "SELECT l.lsn::text, current_setting('synchronous_standby_names'), \
     (SELECT count(*) FROM pg_stat_get_wal_senders() r WHERE r.sync_state IN ('sync', 'quorum') \
     AND CASE WHEN current_setting('synchronous_commit') = 'remote_apply' THEN r.replay_lsn \
     ELSE r.flush_lsn END >= l.lsn)::int4 \
     FROM (SELECT coalesce($1::text::pg_lsn, pg_current_wal_flush_lsn()) AS lsn) l";

/// What [`READ_SQL`] read.
#[derive(Debug, Default)]
pub(crate) struct ServerFacts {
    pub(crate) synchronous_commit: String,
    pub(crate) standby_names: String,
    fsync: String,
    in_recovery: bool,
    /// The first 8 hex digits of the current WAL file name; `None` on a standby.
    timeline: Option<String>,
    /// Whether `pg_control_system()` may be called.
    control_readable: bool,
    /// Whether `pg_stat_replication`'s state and LSN columns are visible (superuser or
    /// `pg_read_all_stats`, which `pg_monitor` includes).
    pub(crate) stats_readable: bool,
    /// `(name, state and LSNs)` of every connected standby.
    standbys: Vec<(String, String)>,
    /// Standbys streaming as `sync` or `quorum`.
    sync_connected: u32,
    /// Of those, the ones keeping up (not lagging).
    sync_keeping_up: u32,
    /// This role's commits in this database waiting on a standby (`SyncRep`) over 1 s.
    sync_waiters: u32,
}

impl ServerFacts {
    /// Standbys whose acknowledgement `synchronous_standby_names` requires (0: none).
    pub(crate) fn required(&self) -> u32 {
        required_standbys(&self.standby_names)
    }
}

/// How many synchronous standbys `synchronous_standby_names` makes a commit wait for:
/// `FIRST k (...)`, `ANY k (...)` and `k (...)` → k; a plain list (or `*`) → 1; empty → 0.
/// Keywords are case-insensitive; a value the server would not have accepted counts as 1.
pub(crate) fn required_standbys(names: &str) -> u32 {
    let names = names.trim();
    if names.is_empty() {
        return 0;
    }
    let lower = names.to_ascii_lowercase();
    let after_keyword = ["first", "any"].iter().find_map(|kw| {
        lower
            .strip_prefix(kw)
            .filter(|rest| rest.starts_with(char::is_whitespace))
    });
    let rest = after_keyword.unwrap_or(&lower).trim_start();
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let is_count = digits > 0 && rest[digits..].trim_start().starts_with('(');
    match rest[..digits].parse::<u32>() {
        Ok(k) if is_count => k.max(1),
        _ => 1,
    }
}

/// "1 synchronous standby", "2 synchronous standbys".
fn standbys(n: u32) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!("{n} synchronous standby{s}")
}

/// What a failover costs where no synchronous standby confirms the commits.
const FAILOVER: &str =
    "a failover to a standby can lose the records it had not received, and their keys would run again";

/// The level and its sentence. Every sentence below `replicated` says what a failover loses.
fn level(f: &ServerFacts) -> (DurabilityLevel, String) {
    let (commit, required) = (f.synchronous_commit.as_str(), f.required());
    if f.fsync == "off" {
        let s = "fsync is off: a crash of the server's host can lose or corrupt acknowledged \
                 records, and their keys would run again";
        return (DurabilityLevel::Volatile, s.into());
    }
    if commit == "off" {
        let s = "synchronous_commit = off: commits are acknowledged before they reach disk, so \
                 a crash can lose the last records, and their keys would run again";
        return (DurabilityLevel::Volatile, s.into());
    }
    let waits = matches!(commit, "on" | "remote_write" | "remote_apply");
    if f.in_recovery {
        let s = format!("the server is a standby (in recovery): it takes no writes; {FAILOVER}");
        return (DurabilityLevel::Local, s);
    }
    if waits && required > 0 && f.sync_connected >= required {
        let s = format!("commits wait for {} ({commit})", standbys(required));
        return (DurabilityLevel::Replicated, s);
    }
    let lose = "a failover can lose records, and their keys would run again";
    let summary = if commit == "local" {
        format!("synchronous_commit = local: commits are on this server's disk when acknowledged, before any standby has them: {lose}")
    } else if required > 0 && !f.stats_readable {
        format!("synchronous_standby_names asks for {}, but pg_stat_replication is {UNREADABLE}: whether one is connected is unknown; {FAILOVER}", standbys(required))
    } else if required > 0 {
        format!("commits wait for {} but {} connected: commits block until one connects, and a commit whose wait is cancelled is acknowledged without it; {FAILOVER}", standbys(required), f.sync_connected)
    } else if f.standbys.is_empty() {
        "commits are on this server's disk when acknowledged and no standby is connected: \
         losing this server loses the records, and their keys would run again; so would a \
         failover to a standby that had not received them"
            .into()
    } else {
        format!("commits are acknowledged before any standby has them: {lose}")
    };
    (DurabilityLevel::Local, summary)
}

/// Why a store requiring synchronous replication refuses new keys now, if it does.
pub(crate) fn refusal(f: &ServerFacts) -> Option<String> {
    let required = f.required();
    Some(if f.in_recovery {
        "the server is a standby (in recovery)".into()
    } else if required == 0 {
        "synchronous_standby_names is empty: commits do not wait for any standby".into()
    } else if !matches!(f.synchronous_commit.as_str(), "on" | "remote_apply") {
        format!("synchronous_commit is {}", f.synchronous_commit)
    } else if !f.stats_readable {
        format!("pg_stat_replication is {UNREADABLE}")
    } else if f.sync_connected < required {
        format!(
            "no synchronous standby connected ({} of {required} required)",
            f.sync_connected
        )
    } else if f.sync_keeping_up < required {
        "the synchronous standby has not acknowledged WAL for over 1 s".into()
    } else if f.sync_waiters > 0 {
        "a store commit has waited over 1 s for the synchronous standby".into()
    } else {
        return None;
    })
}

/// The report of `f`, its facts in the server's terms.
fn report(f: &ServerFacts, system_id: String) -> Durability {
    let (level, summary) = level(f);
    let timeline = f.timeline.clone();
    let mut d = Durability::new(level, summary)
        .with_fact("synchronous_commit", &f.synchronous_commit)
        .with_fact("synchronous_standby_names", &f.standby_names)
        .with_fact("synchronous standbys required", f.required().to_string())
        .with_fact("fsync", &f.fsync)
        .with_fact("pg_is_in_recovery", f.in_recovery.to_string())
        .with_fact(
            "timeline",
            timeline.unwrap_or_else(|| "not read (in recovery)".into()),
        )
        .with_fact("system identifier", system_id);
    if f.standbys.is_empty() {
        d = d.with_fact("standbys", "none connected");
    }
    for (name, state) in &f.standbys {
        d = d.with_fact(format!("standby {name}"), state);
    }
    d
}

/// Waits until the synchronous standbys have the WAL written so far on `conn`'s server (read
/// right after a write on that connection), polling every [`POLL`] up to `deadline`.
///
/// # Errors
/// Why it was not confirmed: `synchronous_standby_names` emptied, the deadline passed, or a
/// statement failed.
pub(crate) async fn confirm(conn: &mut PgConnection, deadline: Instant) -> Result<(), String> {
    let mut lsn: Option<String> = None;
    loop {
        let query = sqlx::query(CONFIRM_SQL).bind(lsn.as_deref());
        let row: PgRow = conn
            .fetch_one(query)
            .await
            .map_err(|e| format!("reading the standbys' positions failed: {e}"))?;
        let read = |i| row.try_get::<String, _>(i).map_err(|e| e.to_string());
        let names = read(1)?;
        let required = required_standbys(&names);
        if required == 0 {
            return Err("synchronous_standby_names is empty".into());
        }
        let have = row.try_get::<i32, _>(2).map_err(|e| e.to_string())?.max(0) as u32;
        if have >= required {
            return Ok(());
        }
        if Instant::now() + POLL > deadline {
            let s = if required == 1 { "" } else { "s" };
            return Err(format!(
                "{have} of {required} synchronous standby{s} had it at the deadline"
            ));
        }
        if lsn.is_none() {
            lsn = Some(read(0)?);
        }
        tokio::time::sleep(POLL).await;
    }
}

impl PostgresStore {
    /// Reads the settings and standbys ([`READ_SQL`]).
    pub(crate) async fn read_server(&self) -> Result<ServerFacts> {
        let r = self
            .pool
            .fetch_one(sqlx::query(READ_SQL).bind(UNREADABLE))
            .await?;
        let count = |i: usize| -> Result<u32> { Ok(r.try_get::<i32, _>(i)?.max(0) as u32) };
        let names: Vec<String> = r.try_get(7)?;
        let states: Vec<String> = r.try_get(8)?;
        Ok(ServerFacts {
            synchronous_commit: r.try_get(0)?,
            standby_names: r.try_get(1)?,
            fsync: r.try_get(2)?,
            in_recovery: r.try_get(3)?,
            timeline: r.try_get(4)?,
            control_readable: r.try_get(5)?,
            stats_readable: r.try_get(6)?,
            standbys: names.into_iter().zip(states).collect(),
            sync_connected: count(9)?,
            sync_keeping_up: count(10)?,
            sync_waiters: count(11)?,
        })
    }

    /// The cluster's system identifier, or why it was not read.
    async fn read_system_identifier(&self, readable: bool) -> Result<String> {
        if !readable {
            return Ok("not readable (no EXECUTE on pg_control_system())".into());
        }
        let sql = "SELECT system_identifier::text FROM pg_control_system()";
        Ok(sqlx::query_scalar(sql).fetch_one(&self.pool).await?)
    }

    /// Reads the server again for the refusal of new keys, when `guard` asks for it (see
    /// [`SyncGuard::recheck_due`]): at most one read at a time, at most one a second.
    pub(crate) async fn recheck(&self, guard: &SyncGuard) {
        if guard.recheck_due() {
            let read = self.read_server().await;
            guard.rechecked(read.ok().as_ref().map(refusal));
        }
    }
}

impl PostgresStore {
    /// [`idemgate_core::gauges::GaugedStore::durability`]: the report of one read of the server; requiring
    /// synchronous replication, the refusal of new keys too, which the store then takes.
    pub(crate) async fn durability_report(&self) -> Result<Durability> {
        let facts = self.read_server().await?;
        let system_id = self.read_system_identifier(facts.control_readable).await?;
        let mut report = report(&facts, system_id);
        if let Some(guard) = &self.sync {
            let reason = refusal(&facts);
            guard.set(reason.clone());
            report = report
                .with_fact("require_synchronous_replication", "on")
                .with_fact(
                    "store commits waiting over 1 s",
                    facts.sync_waiters.to_string(),
                );
            report.refusing_new_keys = reason;
        }
        if let Some(link) = &self.journal {
            report = report.with_fact(
                "forward journal",
                link.journal.options.path.display().to_string(),
            );
            if report.refusing_new_keys.is_none() {
                report.refusing_new_keys = link.journal.refusing();
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_standbys_of_every_form() {
        for (names, k) in [
            ("", 0),
            ("   ", 0),
            ("standby", 1),
            ("a, b, c", 1),
            ("*", 1),
            ("\"first\", b", 1),
            ("first", 1),
            ("FIRST 2 (a, b, c)", 2),
            ("first 1 (standby)", 1),
            ("ANY 3 (a, b, c, d)", 3),
            ("any 2(a,b)", 2),
            ("2 (a, b)", 2),
            ("2(a,b)", 2),
            ("FIRST 1 (*)", 1),
            ("  ANY   1   ( \"s 1\" , s2 )  ", 1),
            ("first2, b", 1),
        ] {
            assert_eq!(required_standbys(names), k, "{names:?}");
        }
    }

    fn facts(commit: &str, names: &str, connected: u32) -> ServerFacts {
        ServerFacts {
            synchronous_commit: commit.into(),
            standby_names: names.into(),
            fsync: "on".into(),
            stats_readable: true,
            standbys: vec![("standby".into(), "state=streaming".into())],
            sync_connected: connected,
            sync_keeping_up: connected,
            ..ServerFacts::default()
        }
    }

    #[test]
    fn levels_follow_the_settings_and_the_standbys() {
        let (level_of, summary) = level(&facts("remote_apply", "FIRST 1 (standby)", 1));
        assert_eq!(level_of, DurabilityLevel::Replicated);
        assert_eq!(
            summary,
            "commits wait for 1 synchronous standby (remote_apply)"
        );
        let local = level(&facts("on", "", 0));
        assert_eq!(local.0, DurabilityLevel::Local);
        assert!(
            local.1.contains("before any standby has them"),
            "{}",
            local.1
        );
        let mut alone = facts("on", "", 0);
        alone.standbys.clear();
        assert!(level(&alone).1.contains("no standby"));
        assert_eq!(level(&facts("off", "s", 1)).0, DurabilityLevel::Volatile);
        assert_eq!(level(&facts("local", "s", 1)).0, DurabilityLevel::Local);
        assert_eq!(
            level(&facts("on", "ANY 2 (a, b)", 1)).0,
            DurabilityLevel::Local
        );
        let mut no_fsync = facts("on", "s", 1);
        no_fsync.fsync = "off".into();
        assert_eq!(level(&no_fsync).0, DurabilityLevel::Volatile);
    }

    #[test]
    fn every_sentence_below_replicated_says_what_a_failover_loses() {
        let mut alone = facts("on", "", 0);
        alone.standbys.clear();
        assert!(level(&alone)
            .1
            .ends_with("run again; so would a failover to a standby that had not received them"));
        let mut unreadable = facts("on", "s", 0);
        unreadable.stats_readable = false;
        let mut standby = facts("on", "", 0);
        standby.in_recovery = true;
        for f in [
            facts("on", "", 0),
            facts("local", "s", 1),
            facts("on", "ANY 2 (a, b)", 1),
            unreadable,
            standby,
        ] {
            let (lvl, line) = level(&f);
            assert_eq!(lvl, DurabilityLevel::Local, "{line}");
            assert!(line.contains("failover"), "{line}");
            assert!(line.contains("run again"), "{line}");
        }
        assert!(level(&facts("on", "s", 0))
            .1
            .ends_with(&format!("; {FAILOVER}")));
    }

    #[test]
    fn refusals_name_what_is_missing() {
        assert_eq!(refusal(&facts("on", "s", 1)), None);
        let empty = refusal(&facts("on", "", 1)).unwrap();
        assert!(empty.contains("synchronous_standby_names"), "{empty}");
        let none = refusal(&facts("on", "s", 0)).unwrap();
        assert!(none.contains("no synchronous standby connected"), "{none}");
        let mut stalled = facts("on", "s", 1);
        stalled.sync_waiters = 2;
        assert!(refusal(&stalled).unwrap().contains("waited over 1 s"));
        stalled.sync_keeping_up = 0;
        assert!(refusal(&stalled).unwrap().contains("not acknowledged"));
    }
}
