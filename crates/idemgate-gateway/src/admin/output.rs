//! What `inspect`, `release` and `stats` print: a table, or JSON with stable field names
//! (docs/operations.md, "JSON output"). Times are ms since the epoch in JSON, RFC 3339 in tables.

use std::io::Write;
use std::time::{Duration, UNIX_EPOCH};

use idemgate_core::admin::Listing;
use idemgate_core::{RawRecord, RecordState, StoreCount, UnixMillis};
use serde::Serialize;

use super::audit::ResolvedView;

/// One record as shown. `None` fields were missing or unreadable in the store.
#[derive(Debug, Serialize)]
pub struct RecordView {
    /// Route template.
    pub route: String,
    /// Principal.
    pub principal: String,
    /// Idempotency key.
    pub key: String,
    /// `in_progress`, `completed`, `failed`, or what a corrupt record holds.
    pub state: Option<String>,
    /// What it means for the next retry (`in_flight`, `stuck`, `completed`, `failed`,
    /// `expired`, `corrupt`).
    pub condition: &'static str,
    /// Why the record fails validation (it is then never replayed); `None` when valid.
    pub problem: Option<String>,
    /// Fingerprint algorithm version.
    pub fingerprint_version: Option<i64>,
    /// Fence.
    pub fence: Option<i64>,
    /// The lease token's first 8 hex digits (`in_progress` only).
    pub lease_token: Option<String>,
    /// Lease expiry, ms since the epoch.
    pub lease_expires_at: Option<UnixMillis>,
    /// Creation, ms since the epoch.
    pub created_at: Option<UnixMillis>,
    /// Outcome time, ms since the epoch.
    pub completed_at: Option<UnixMillis>,
    /// TTL end, ms since the epoch.
    pub expires_at: Option<UnixMillis>,
    /// Stored HTTP status.
    pub status: Option<i64>,
    /// Whether the response body was kept.
    pub replayable: Option<bool>,
    /// Stored body size in bytes.
    pub body_bytes: Option<usize>,
    /// The stored body (only with `--show-body`; invalid UTF-8 replaced). A sealed body is
    /// shown opened when the configuration's `encryption_key_files` hold its key
    /// ([`RecordView::open_body`]), else as `sealed, key id ...`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The encryption key id of a sealed response (docs/security.md); `None` in clear.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sealed_by: Option<String>,
    /// Who resolved the record with `idemgate resolve`, when, from which state, and what
    /// retries get; `None` for a record the operation's own outcome completed.
    pub resolved: Option<ResolvedView>,
    /// `inspect` and `release`: until when (ms since the epoch, store clock) the attempt of
    /// an `in_progress` or `failed` record may still be running at the upstream, by the
    /// gateways' `upstream_timeout` (see `admin::window`); absent when it cannot be.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub may_run_until: Option<UnixMillis>,
    /// `release` only: `released`, or `changed` (kept: it changed since it was shown);
    /// `resolve`: `resolved`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<&'static str>,
}

fn condition(raw: &RawRecord, valid: bool, now: UnixMillis) -> &'static str {
    if raw.expires_at.is_some_and(|e| e <= now) {
        return "expired";
    }
    if !valid {
        return "corrupt";
    }
    match raw.state.as_deref().and_then(RecordState::parse) {
        Some(RecordState::InProgress) if raw.lease_expires_at.is_some_and(|l| l > now) => {
            "in_flight"
        }
        Some(RecordState::InProgress) => "stuck",
        Some(RecordState::Completed) => "completed",
        Some(RecordState::Failed) => "failed",
        None => "corrupt",
    }
}

impl RecordView {
    /// The view of `raw` at the store clock `now`.
    pub fn new(raw: &RawRecord, now: UnixMillis, show_body: bool) -> Self {
        let problem = raw.clone().validate().err().map(|e| match e {
            idemgate_core::StoreError::Corrupt { detail } => detail,
            other => other.to_string(),
        });
        let in_progress = raw.state.as_deref() == Some("in_progress");
        let body = raw.body.as_ref().filter(|_| show_body);
        let token = raw.lease_token.filter(|_| in_progress);
        Self {
            route: raw.key.route.clone(),
            principal: raw.key.principal.clone(),
            key: raw.key.key.as_str().to_owned(),
            state: raw.state.clone(),
            condition: condition(raw, problem.is_none(), now),
            problem,
            fingerprint_version: raw.fingerprint_version,
            fence: raw.fence,
            lease_token: token.map(|t| format!("{:016x}", t as u64)[..8].to_owned()),
            lease_expires_at: raw.lease_expires_at.filter(|_| in_progress),
            created_at: raw.created_at,
            completed_at: raw.completed_at,
            expires_at: raw.expires_at,
            status: raw.status,
            replayable: raw.replayable,
            body_bytes: raw.body.as_ref().map(|b| b.len()),
            body: match &raw.sealed_by {
                Some(id) => body.map(|_| format!("sealed, key id {id}")),
                None => body.map(|b| String::from_utf8_lossy(b).into_owned()),
            },
            sealed_by: raw.sealed_by.clone(),
            resolved: ResolvedView::of(raw),
            may_run_until: None,
            outcome: None,
        }
    }

    /// With `--show-body`: replaces a sealed body by its plaintext when `keyring` opens it
    /// (the record validated first); one that does not open says why.
    pub fn open_body(&mut self, raw: &RawRecord, keyring: &idemgate_core::seal::Keyring) {
        if self.body.is_none() || raw.sealed_by.is_none() {
            return;
        }
        let Ok(record) = raw.clone().validate() else {
            return;
        };
        let Some(sealed) = record.response else {
            return;
        };
        self.body = Some(match keyring.open(&record.key, record.fence, sealed) {
            Ok(clear) => String::from_utf8_lossy(&clear.body).into_owned(),
            Err(e) => {
                // As the gateways with these keys read it: corrupt, never replayed.
                self.condition = "corrupt";
                self.problem = Some(e.to_string());
                format!("not opened: {e}")
            }
        });
    }

    /// Every record of `listing`.
    pub fn all(listing: &Listing, show_body: bool) -> Vec<Self> {
        let views = listing.records.iter();
        views
            .map(|r| Self::new(r, listing.now, show_body))
            .collect()
    }

    /// `released: ...` or `kept (changed since shown): ...`, for `release`.
    pub fn outcome_line(&self) -> String {
        let what = match self.outcome {
            Some("released") => "released",
            _ => "kept, it changed since it was shown:",
        };
        format!("{what} {} {} {}", self.route, self.principal, self.key)
    }
}

/// RFC 3339 (seconds) of a time in ms since the epoch; `-` when unknown.
fn time(ms: Option<UnixMillis>) -> String {
    match ms.and_then(|ms| u64::try_from(ms).ok()) {
        Some(ms) => {
            humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
        }
        None => "-".into(),
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

/// How a column shows a record.
type Cell = fn(&RecordView) -> String;

/// The table's columns: each one's header and cell.
const COLUMNS: [(&str, Cell); 11] = [
    ("ROUTE", |v| v.route.clone()),
    ("PRINCIPAL", |v| v.principal.clone()),
    ("STATE", |v| opt(v.state.as_deref())),
    ("CONDITION", |v| v.condition.to_owned()),
    ("FP", |v| opt(v.fingerprint_version)),
    ("FENCE", |v| opt(v.fence)),
    ("LEASE", |v| match &v.lease_token {
        Some(t) => format!("{t}.. until {}", time(v.lease_expires_at)),
        None => "-".into(),
    }),
    ("CREATED", |v| time(v.created_at)),
    ("EXPIRES", |v| time(v.expires_at)),
    ("STATUS", |v| opt(v.status)),
    ("BODY", |v| opt(v.body_bytes.map(|n| format!("{n} B")))),
];

/// Prints `views` as JSON (`{"now": ms, "records": [...]}`) or as a table, with each
/// record's problem and body (if shown) below it.
///
/// # Errors
/// When writing fails.
pub fn print_records(
    out: &mut impl Write,
    views: &[RecordView],
    now: UnixMillis,
    json: bool,
) -> anyhow::Result<()> {
    if json {
        let doc = serde_json::json!({ "now": now, "records": views });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(());
    }
    let rows: Vec<[String; 11]> = views
        .iter()
        .map(|v| COLUMNS.map(|(_, cell)| cell(v)))
        .collect();
    let mut widths = COLUMNS.map(|(header, _)| header.len());
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let cells = cells.iter().zip(widths);
        let padded: Vec<String> = cells.map(|(c, w)| format!("{c:<w$}")).collect();
        padded.join("  ").trim_end().to_owned()
    };
    writeln!(out, "{}", line(COLUMNS.map(|(header, _)| header).to_vec()))?;
    for (r, v) in rows.iter().zip(views) {
        writeln!(out, "{}", line(r.iter().map(String::as_str).collect()))?;
        if let Some(p) = &v.problem {
            writeln!(out, "  corrupt: {p}")?;
        }
        if let Some(r) = &v.resolved {
            writeln!(out, "  {}", r.line())?;
        }
        if let Some(t) = v.may_run_until {
            let t = super::audit::time(t);
            let why = "by the gateways' upstream_timeout; release refuses it until then";
            writeln!(
                out,
                "  may still be running at the upstream until {t} ({why})"
            )?;
        }
        if let Some(b) = &v.body {
            writeln!(out, "  body: {b}")?;
        }
    }
    Ok(())
}

/// `idemgate stats`, as printed.
#[derive(Debug, Serialize)]
pub struct StatsView {
    /// `sqlite`, `postgres` or `redis`.
    pub backend: &'static str,
    /// The store clock, ms since the epoch.
    pub now: UnixMillis,
    /// Records held, expired ones included.
    pub records: u64,
    /// Counts by state: `in_progress`, `completed`, `failed`, `unknown` (corrupt).
    pub by_state: StateCounts,
    /// Live `in_progress` records whose lease lapsed (their holder died).
    pub stuck_in_progress: u64,
    /// Stored response bodies, in bytes; `None` where an estimate does not sum them.
    pub body_bytes: Option<u64>,
    /// `created_at` of the oldest record, ms since the epoch.
    pub oldest_created_at: Option<UnixMillis>,
    /// Expired records not yet purged (`idemgate purge` removes them; always 0 on a store
    /// that expires records itself, like Redis).
    pub expired: u64,
    /// True when the counts are estimates (a large table or database: see
    /// [`StoreCount::approximate`]).
    pub approximate: bool,
    /// Records holding a sealed response, per encryption key id (exact, expired ones
    /// included); `None` where the store cannot count them (a key service's store is counted
    /// on the key service's host).
    pub sealed_by_key_id: Option<std::collections::BTreeMap<String, u64>>,
}

/// Records per state.
#[derive(Debug, Serialize)]
pub struct StateCounts {
    /// `in_progress`.
    pub in_progress: u64,
    /// `completed`.
    pub completed: u64,
    /// `failed`.
    pub failed: u64,
    /// A missing or unknown state (corrupt records).
    pub unknown: u64,
}

impl StatsView {
    /// The view of `s` for `backend`.
    pub fn new(s: &StoreCount, backend: &'static str) -> Self {
        Self {
            backend,
            now: s.now,
            records: s.records(),
            by_state: StateCounts {
                in_progress: s.in_progress,
                completed: s.completed,
                failed: s.failed,
                unknown: s.unknown_state,
            },
            stuck_in_progress: s.stuck_in_progress,
            body_bytes: s.body_bytes,
            oldest_created_at: s.oldest_created_at,
            expired: s.expired.unwrap_or(0),
            approximate: s.approximate,
            sealed_by_key_id: None,
        }
    }
}

/// Prints `view` as JSON or as `name  value` lines.
///
/// # Errors
/// When writing fails.
pub fn print_stats(out: &mut impl Write, view: &StatsView, json: bool) -> anyhow::Result<()> {
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(view)?)?;
        return Ok(());
    }
    let s = &view.by_state;
    let lines = [
        ("backend", view.backend.to_owned()),
        ("records", view.records.to_string()),
        ("in_progress", s.in_progress.to_string()),
        ("  stuck (lease lapsed)", view.stuck_in_progress.to_string()),
        ("completed", s.completed.to_string()),
        ("failed", s.failed.to_string()),
        ("unknown state", s.unknown.to_string()),
        (
            "body bytes",
            view.body_bytes.map_or("-".into(), |b| b.to_string()),
        ),
        ("oldest record", time(view.oldest_created_at)),
        ("expired, not purged", view.expired.to_string()),
    ];
    for (name, value) in lines {
        writeln!(out, "{name:<24}{value}")?;
    }
    if view.approximate {
        writeln!(out, "{:<24}estimated (a large store)", "counts")?;
    }
    match &view.sealed_by_key_id {
        None => writeln!(out, "{:<24}not counted by this store", "sealed")?,
        Some(ids) if ids.is_empty() => writeln!(out, "{:<24}none", "sealed")?,
        Some(ids) => {
            for (id, n) in ids {
                writeln!(out, "{:<24}{n}", format!("sealed {id}"))?;
            }
        }
    }
    Ok(())
}
