//! The audit trail of operator overrides (`idemgate resolve`, `idemgate release`): who,
//! when, which key (its keyed log hash), from which state to which.
//!
//! Each entry is written twice: as a `warn` event on target [`TARGET`] (through the
//! process's log subscriber, in `--log-format`), and as one plain `idemgate audit: ...` line
//! written straight to standard error and flushed before the command exits, so neither a
//! `RUST_LOG` filter nor a log writer that drops lines under load can lose it. `resolve`
//! also stores its entry in the record ([`idemgate_core::admin::Resolution`]), where
//! `idemgate inspect` shows it; `release` deletes the record, so its log lines are the trail.

use std::io::Write;
use std::time::{Duration, UNIX_EPOCH};

use idemgate_core::admin::{resolution_of, resolved_detail, Operator, Resolution};
use idemgate_core::lifecycle::{hash_key, principal_hash};
use idemgate_core::{RawRecord, ScopedKey, StoredResponse, UnixMillis};
use serde::Serialize;

use crate::cli::StoreArgs;

/// The log target of audit entries (`RUST_LOG=idemgate::audit=warn` keeps them).
pub const TARGET: &str = "idemgate::audit";

/// Who runs the command: `--operator`, else `$SUDO_USER` (the person behind `sudo`), else
/// `$USER` or `$LOGNAME`, else `uid:N`; with the process's uid and the host name.
pub(crate) fn operator(flag: Option<&str>) -> Operator {
    let uid = process_uid();
    let env = ["SUDO_USER", "USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.trim().is_empty()));
    let name = flag
        .map(str::to_owned)
        .or(env)
        .or_else(|| uid.map(|u| format!("uid:{u}")))
        .unwrap_or_else(|| "unknown".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty());
    Operator { name, uid, host }
}

#[cfg(unix)]
fn process_uid() -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").ok().map(|m| m.uid())
}

#[cfg(not(unix))]
fn process_uid() -> Option<u32> {
    None
}

/// Uses the gateways' log hash secret (`IDEMGATE_LOG_HASH_KEY`, else `log_hash_key` in
/// `--config`), so the key hash in the audit entry matches the gateways' logs. Without one
/// the hash is under a secret random to this run.
///
/// # Errors
/// An unreadable file, or a secret shorter than the minimum.
pub(crate) fn use_log_secret(store: &StoreArgs) -> anyhow::Result<()> {
    let secret = match std::env::var("IDEMGATE_LOG_HASH_KEY") {
        Ok(s) => s,
        Err(_) => store.file()?.log_hash_key,
    };
    if !secret.is_empty() {
        idemgate_core::loghash::set_secret(secret.as_bytes())
            .map_err(|e| anyhow::anyhow!("log_hash_key: {e}"))?;
    }
    Ok(())
}

/// One operator override, as logged.
#[derive(Debug)]
pub(crate) struct Entry<'a> {
    /// `resolved` or `released`.
    pub(crate) action: &'static str,
    /// Who.
    pub(crate) by: &'a Operator,
    /// When, ms since the epoch.
    pub(crate) at: UnixMillis,
    /// The record's scope.
    pub(crate) scope: &'a ScopedKey,
    /// The state before, e.g. `in_progress (stuck), fence 1`.
    pub(crate) from: String,
    /// The state after, e.g. `completed, status 201, replayable`.
    pub(crate) to: String,
}

/// Writes `entry`: the `warn` event, then the plain line on standard error, flushed.
///
/// # Errors
/// When standard error cannot be written.
pub(crate) fn record(entry: &Entry<'_>) -> std::io::Result<()> {
    let (key, principal) = (hash_key(entry.scope), principal_hash(entry.scope));
    let by = &entry.by.name;
    let uid = entry.by.uid.map_or("-".into(), |u| u.to_string());
    let host = entry.by.host.as_deref().unwrap_or("-");
    let at = time(entry.at);
    tracing::warn!(target: TARGET, action = entry.action, by = %by, uid = %uid, host = %host,
        at = %at, route = %entry.scope.route, key = %key, principal = %principal,
        from = %entry.from, to = %entry.to, "operator override");
    let line = format!(
        "idemgate audit: {} by={by:?} uid={uid} host={host} at={at} route={:?} key={key} principal={principal} from={:?} to={:?}",
        entry.action, entry.scope.route, entry.from, entry.to
    );
    let mut err = std::io::stderr().lock();
    writeln!(err, "{line}")?;
    err.flush()
}

/// RFC 3339 (milliseconds) of a time in ms since the epoch.
pub(crate) fn time(ms: UnixMillis) -> String {
    let ms = u64::try_from(ms).unwrap_or(0);
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// How `inspect` shows a resolved record: its audit entry and, when not replayable, the
/// operator's text.
#[derive(Debug, Serialize)]
pub struct ResolvedView {
    /// The audit entry stored with the record.
    #[serde(flatten)]
    pub resolution: Resolution,
    /// The text retries get in the `410` (not-replayable resolutions only).
    pub detail: Option<String>,
}

impl ResolvedView {
    /// The resolution `raw` carries, if an operator resolved it.
    pub fn of(raw: &RawRecord) -> Option<Self> {
        let headers = StoredResponse::decode_headers(raw.headers.as_deref()?).ok()?;
        Some(Self {
            resolution: resolution_of(&headers)?,
            detail: resolved_detail(&headers),
        })
    }

    /// `resolved by NAME (uid N, HOST) at TIME: was STATE (fence N); retries get ...`.
    pub fn line(&self) -> String {
        let r = &self.resolution;
        let uid = r.by.uid.map(|u| format!("uid {u}"));
        let who: Vec<String> = uid.into_iter().chain(r.by.host.clone()).collect();
        let who = match who.is_empty() {
            true => String::new(),
            false => format!(" ({})", who.join(", ")),
        };
        let gets = match (r.replayable, &self.detail) {
            (true, _) => format!("status {}, replayed", r.status),
            (false, Some(d)) => format!("410 (ran with status {}): {d}", r.status),
            (false, None) => format!("410 (ran with status {})", r.status),
        };
        format!(
            "resolved by {}{who} at {}: was {} (fence {}); retries get {gets}",
            r.by.name,
            time(r.at),
            r.from_state,
            r.from_fence
        )
    }
}
