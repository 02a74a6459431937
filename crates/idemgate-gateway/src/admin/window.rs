//! Whether a record's attempt may still be running at the upstream, and until when.
//!
//! A gateway that dies (or stops waiting) does not stop the API: the request it forwarded
//! runs on to the API's own end. "It did not run" can only be concluded once that request
//! can no longer be running, so `release` refuses an `in_progress` or `failed` record inside
//! this window unless the operator says the API has stopped (`--upstream-stopped`).
//!
//! The window is bounded by what the gateways know: a holder forwards only under a live
//! lease, so the attempt started no later than the record's lease expiry (the latest one,
//! after renewals and take-overs; `created_at` + the route's `max_lease` when the lease is
//! unreadable), and a `failed` record's attempt started no later than its failure
//! (`completed_at`: an upstream `5xx`, but also a timeout or a connection broken after the
//! request was sent, after which the API may still be working). The gateways wait at most
//! `upstream_timeout` for an answer; [`MARGIN`] is added for the request's way to the API.
//! All of these are store-clock times, compared with the store's clock at the listing
//! ([`Listing::now`]): the database's on PostgreSQL, the server's on Redis, this host's on
//! SQLite (whose gateways run on the same host). The API's own limit (its worker timeout,
//! its database statement timeout) may be longer than `upstream_timeout`; the gateways
//! cannot know it, so docs/operations.md tells operators to wait past it too.

use std::time::Duration;

use anyhow::bail;
use idemgate_core::admin::Listing;
use idemgate_core::record::duration_ms as millis;
use idemgate_core::{RawRecord, RecordState, UnixMillis};

use super::audit::time;
use super::output::RecordView;
use crate::config::AdminView;

/// Added to `upstream_timeout`: the forwarded request's way to the API and its start there.
pub(crate) const MARGIN: Duration = Duration::from_secs(5);

/// How long the gateways let an attempt run, from their configuration.
#[derive(Debug)]
pub(crate) struct Limits {
    /// The gateways' `upstream_timeout` (one value for every route), and the route policies
    /// for a route's `max_lease`.
    config: AdminView,
    /// False when no `--config` was given and the built-in defaults stand in.
    from_file: bool,
}

/// Until when a record's attempt may be running at the upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Running {
    /// It cannot be, by the gateways' bound: past the window, or a completed, expired or
    /// unreadable-state record (nothing left for a retry to collide with).
    No,
    /// It may be, until this store-clock time (ms).
    Until(UnixMillis),
    /// The record's times are unreadable: when its attempt started is unknown.
    Unknown,
}

impl Limits {
    /// The limits of `config`; `from_file` says whether it came from `--config`.
    pub(crate) fn new(config: &AdminView, from_file: bool) -> Self {
        let config = config.clone();
        Self { config, from_file }
    }

    fn max_lease(&self, route: &str) -> Duration {
        let policy = &self.config.policy;
        let mut routes = policy.routes();
        routes
            .find(|(r, _)| *r == route)
            .map_or(policy.default_route().max_lease, |(_, p)| p.max_lease)
    }

    /// The latest time the record's last attempt could have been forwarded; `None` when
    /// there is no attempt to wait for (`Some(None)`: unknown).
    fn last_start(&self, raw: &RawRecord) -> Option<Option<UnixMillis>> {
        match raw.state.as_deref().and_then(RecordState::parse)? {
            RecordState::InProgress => Some(match (raw.lease_expires_at, raw.created_at) {
                (Some(lease), created) => Some(created.map_or(lease, |c| c.max(lease))),
                (None, Some(created)) => {
                    Some(created.saturating_add(millis(self.max_lease(&raw.key.route))))
                }
                (None, None) => None,
            }),
            RecordState::Failed => {
                let times = [raw.completed_at, raw.lease_expires_at, raw.created_at];
                Some(times.into_iter().flatten().max())
            }
            RecordState::Completed => None,
        }
    }

    /// Until when `raw`'s attempt may be running, at the store clock `now`.
    pub(crate) fn running(&self, raw: &RawRecord, now: UnixMillis) -> Running {
        if raw.expires_at.is_some_and(|e| e <= now) {
            return Running::No;
        }
        match self.last_start(raw) {
            None => Running::No,
            Some(None) => Running::Unknown,
            Some(Some(start)) => {
                let until = start.saturating_add(millis(self.config.upstream_timeout + MARGIN));
                match now < until {
                    true => Running::Until(until),
                    false => Running::No,
                }
            }
        }
    }

    /// Sets each view's `may_run_until` (the views are `listing`'s records, in order).
    pub(crate) fn annotate(&self, views: &mut [RecordView], listing: &Listing) {
        for (view, raw) in views.iter_mut().zip(&listing.records) {
            if let Running::Until(t) = self.running(raw, listing.now) {
                view.may_run_until = Some(t);
            }
        }
    }

    /// Where `upstream_timeout` came from, for messages.
    fn source(&self) -> &'static str {
        match self.from_file {
            true => "from --config",
            false => "the default: no --config given; pass the gateways' file if it sets another",
        }
    }

    /// Refuses when an attempt of `listing`'s records may still be running at the
    /// upstream, naming each and when all become releasable.
    ///
    /// # Errors
    /// The refusal, with what to do.
    pub(crate) fn refuse_running(&self, listing: &Listing) -> anyhow::Result<()> {
        let (mut lines, mut latest, mut unknown) = (Vec::new(), None::<UnixMillis>, false);
        for raw in &listing.records {
            let what = match self.running(raw, listing.now) {
                Running::No => continue,
                Running::Until(t) => {
                    latest = latest.max(Some(t));
                    let secs = (t - listing.now + 999) / 1000;
                    format!("may still be running until {} (in {secs} s)", time(t))
                }
                Running::Unknown => {
                    unknown = true;
                    "its times are unreadable: when it started is unknown".into()
                }
            };
            let state = raw.state.as_deref().unwrap_or("-");
            let (route, principal) = (&raw.key.route, &raw.key.principal);
            lines.push(format!("  {route} {principal} ({state}): {what}"));
        }
        let when = match (latest, unknown) {
            _ if lines.is_empty() => return Ok(()),
            (Some(t), false) => format!("Releasable from {}. ", time(t)),
            _ => "A record whose times are unreadable is released only with --upstream-stopped. "
                .into(),
        };
        let timeout = humantime::format_duration(self.config.upstream_timeout);
        let margin = humantime::format_duration(MARGIN);
        bail!(
            "the operation of {} record(s) may still be running at the upstream:\n{}\n\
             The API does not stop when a gateway dies or stops waiting, so \"it did not run\" \
             cannot be concluded yet: released now, the next retry runs the operation while the \
             first may still land. The window is the gateways' upstream_timeout ({timeout}, {}) \
             + {margin} after the attempt's last lease (in_progress) or its failure (failed), \
             by the store's clock; if the API's own limit (worker timeout, statement timeout) \
             is longer, wait past that too. {when}Pass --upstream-stopped only if the API can \
             no longer be running this request: its workers were restarted or its own timeout \
             has passed. Nothing was released",
            lines.len(),
            lines.join("\n"),
            self.source(),
        )
    }
}

#[cfg(test)]
mod tests;
