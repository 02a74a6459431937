//! The access log: one `info` line per covered request, on target `idemgate::access`.
//!
//! Fields: `route` (the template), `outcome` (one of [`crate::metrics::OUTCOMES`]),
//! `status` (absent when the upstream failed without a response: the gateway answers `502`
//! or `504`), `latency_ms` (arrival to response head, milliseconds), and `key` and
//! `principal` as keyed hashes ([`idemgate_core::loghash`]) once they were read. Never a
//! body, a header value or a credential.
//!
//! A client that leaves before its answer gets a line with outcome `client_gone` (the
//! operation still runs to its end; its outcome is in the metrics and any `warn` lines).

use idemgate_core::loghash::{key_hash, principal_hash};
use tokio::time::Instant;

use crate::glue::Answered;
use crate::metrics::RouteMetrics;

/// The tracing target of access log lines (filter with `RUST_LOG=idemgate::access=off`).
pub const TARGET: &str = "idemgate::access";

/// One covered request's line, written when [`Access::finish`] is called or, if the
/// request was dropped before, when this is dropped.
pub(crate) struct Access<'a> {
    meters: &'a RouteMetrics,
    started: Instant,
    /// Whether the line will be written: hashes are computed only then.
    logging: bool,
    key: Option<String>,
    principal: Option<String>,
    finished: bool,
}

impl<'a> Access<'a> {
    pub(crate) fn start(meters: &'a RouteMetrics, started: Instant) -> Self {
        Self {
            meters,
            started,
            logging: tracing::enabled!(target: TARGET, tracing::Level::INFO),
            key: None,
            principal: None,
            finished: false,
        }
    }

    pub(crate) fn key(&mut self, key: &str) {
        if self.logging {
            self.key = Some(key_hash(key));
        }
    }

    pub(crate) fn principal(&mut self, principal: &str) {
        if self.logging {
            self.principal = Some(principal_hash(principal));
        }
    }

    /// Records the request's duration and writes its line.
    pub(crate) fn finish<E>(mut self, answered: &Answered<E>) {
        let status = answered.1.as_ref().ok().map(|r| r.status().as_u16());
        self.write(answered.0, status);
    }

    fn write(&mut self, outcome: &'static str, status: Option<u16>) {
        self.finished = true;
        self.meters.request_took(outcome, self.started);
        if !self.logging {
            return;
        }
        let latency_ms = self.started.elapsed().as_secs_f64() * 1000.0;
        tracing::info!(
            target: TARGET,
            route = self.meters.route(),
            outcome,
            status,
            latency_ms = (latency_ms * 1000.0).round() / 1000.0,
            key = self.key.as_deref(),
            principal = self.principal.as_deref(),
            "request"
        );
    }
}

impl Drop for Access<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.write("client_gone", None);
        }
    }
}
