//! The layer's metrics recorded through the [`metrics`] facade. Without the `metrics`
//! feature the layer records nothing; the route labels stay, for the access log.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use idemgate_core::counters::{Series, LIFECYCLE_COUNTERS};
use metrics::{describe_gauge, describe_histogram, Counter, Histogram, Unit};
use tokio::time::Instant;

use super::*;
use crate::policy::Policy;

/// Whether the layer records its metrics (feature `metrics`).
const RECORDS: bool = cfg!(feature = "metrics");

/// Describes (HELP text and unit) every metric of the layer and of the core lifecycle.
/// Call it once after installing the recorder.
pub fn describe() {
    for counter in LIFECYCLE_COUNTERS.iter().chain(&COUNTERS) {
        counter.describe();
    }
    describe_histogram!("idempotency_request_duration_seconds", Unit::Seconds, "Time from a covered request's arrival to its response head, by route template and outcome.");
    describe_histogram!(
        "idempotency_upstream_duration_seconds",
        Unit::Seconds,
        "Time the upstream took to send response headers (or to fail), by route template."
    );
    describe_histogram!("idempotency_store_duration_seconds", Unit::Seconds, "Duration of store calls made by the lifecycle, by operation and backend (timeouts count at the deadline).");
    describe_gauge!(
        "idempotency_pending_outcomes",
        "Outcome writes not yet landed (being retried)."
    );
}

/// Registers every one of [`series`] at 0 with the installed recorder (series already there
/// keep their values).
pub fn register(policy: &Policy, backend: &'static str) {
    for s in series(policy, backend) {
        s.register();
    }
}

/// The handles of one route label, resolved once each.
#[derive(Debug)]
pub struct RouteMetrics {
    route: Arc<str>,
    requests: [OnceLock<Counter>; OUTCOMES.len()],
    durations: [OnceLock<Histogram>; OUTCOMES.len()],
    upstream: [OnceLock<Counter>; STATUS_CLASSES.len()],
    upstream_duration: OnceLock<Histogram>,
}

impl RouteMetrics {
    /// The handles for route label `route`.
    pub fn new(route: &str) -> Self {
        Self {
            route: route.into(),
            requests: Default::default(),
            durations: Default::default(),
            upstream: Default::default(),
            upstream_duration: OnceLock::new(),
        }
    }

    /// The route label.
    pub fn route(&self) -> &str {
        &self.route
    }

    /// Counts one request with `outcome` (one of [`OUTCOMES`]; any other counts as
    /// `rejected`).
    pub fn count(&self, outcome: &'static str) {
        if !RECORDS {
            return;
        }
        let i = outcome_index(outcome);
        self.requests[i]
            .get_or_init(|| {
                metrics::counter!(REQUESTS, "route" => self.route.to_string(), "outcome" => OUTCOMES[i])
            })
            .increment(1);
    }

    /// Records how long a request with `outcome` took until its response head.
    pub fn request_took(&self, outcome: &'static str, started: Instant) {
        if !RECORDS {
            return;
        }
        let i = outcome_index(outcome);
        self.durations[i]
            .get_or_init(|| {
                metrics::histogram!("idempotency_request_duration_seconds", "route" => self.route.to_string(), "outcome" => OUTCOMES[i])
            })
            .record(started.elapsed().as_secs_f64());
    }

    /// Records one upstream call that started at `started` and answered `status` (`None`:
    /// it failed without a response).
    pub fn upstream(&self, status: Option<http::StatusCode>, started: Instant) {
        if !RECORDS {
            return;
        }
        self.upstream_duration
            .get_or_init(|| {
                metrics::histogram!("idempotency_upstream_duration_seconds", "route" => self.route.to_string())
            })
            .record(started.elapsed().as_secs_f64());
        let i = match status.map(|s| s.as_u16() / 100) {
            Some(c @ 1..=5) => usize::from(c) - 1,
            _ => STATUS_CLASSES.len() - 1,
        };
        self.upstream[i]
            .get_or_init(|| {
                metrics::counter!(UPSTREAM_RESPONSES, "route" => self.route.to_string(), "class" => STATUS_CLASSES[i])
            })
            .increment(1);
    }
}

/// The slot of `rejected`, where an outcome not in [`OUTCOMES`] counts.
const REJECTED: usize = 14;

fn outcome_index(outcome: &str) -> usize {
    OUTCOMES
        .iter()
        .position(|o| *o == outcome)
        .unwrap_or(REJECTED)
}

/// The [`RouteMetrics`] of every route label of one policy.
#[derive(Debug)]
pub(crate) struct Meters {
    routes: HashMap<String, Arc<RouteMetrics>>,
    /// Templates axum matched (`MatchedPath`) that no configured route names: as many as
    /// the application's routes, made on first use.
    matched: std::sync::RwLock<HashMap<String, Arc<RouteMetrics>>>,
    unmatched: Arc<RouteMetrics>,
    uncovered: Arc<RouteMetrics>,
}

impl Meters {
    /// The handles of `policy`'s routes, after registering every counter series ([`register`]).
    pub(crate) fn for_policy(policy: &Policy, backend: &'static str) -> Self {
        if RECORDS {
            register(policy, backend);
        }
        let routes = policy
            .routes()
            .map(|(r, _)| (r.to_owned(), Arc::new(RouteMetrics::new(r))))
            .collect();
        Self {
            routes,
            matched: Default::default(),
            unmatched: Arc::new(RouteMetrics::new(UNMATCHED)),
            uncovered: Arc::new(RouteMetrics::new(UNCOVERED)),
        }
    }

    /// The handles of route label `label` (from [`Policy::resolve_parts`]): a configured
    /// route's, [`UNMATCHED`]'s, or those of a template axum matched.
    pub(crate) fn route(&self, label: &str) -> Arc<RouteMetrics> {
        if let Some(m) = self.routes.get(label) {
            return m.clone();
        }
        if label == UNMATCHED {
            return self.unmatched.clone();
        }
        let read = self.matched.read().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = read.get(label) {
            return m.clone();
        }
        drop(read);
        let mut write = self.matched.write().unwrap_or_else(|e| e.into_inner());
        let m = write.entry(label.to_owned()).or_insert_with(|| {
            if RECORDS {
                route_series(label).iter().for_each(Series::register);
            }
            Arc::new(RouteMetrics::new(label))
        });
        m.clone()
    }

    pub(crate) fn uncovered(&self) -> &Arc<RouteMetrics> {
        &self.uncovered
    }
}

/// Counts one request of `route` refused by `limit` (one of [`LIMITS`]).
pub(crate) fn limited(route: &str, limit: &'static str) {
    if !RECORDS {
        return;
    }
    metrics::counter!(LIMITED, "route" => route.to_owned(), "limit" => limit).increment(1);
}

/// Counts one request admitted unlimited because the limit table was full.
pub(crate) fn limit_table_full() {
    if !RECORDS {
        return;
    }
    metrics::counter!("idempotency_limit_table_full_total").increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_and_class_has_its_slot() {
        assert_eq!(OUTCOMES[REJECTED], "rejected", "the fallback slot");
        assert_eq!(outcome_index("no such outcome"), REJECTED);
        for (i, o) in OUTCOMES.iter().enumerate() {
            assert_eq!(outcome_index(o), i);
        }
        let policy = Policy::default()
            .with_route("POST /a/{id}", Default::default())
            .unwrap();
        let meters = Meters::for_policy(&policy, "memory");
        assert_eq!(meters.route("POST /a/{id}").route(), "POST /a/{id}");
        assert_eq!(meters.route(UNMATCHED).route(), UNMATCHED);
        assert_eq!(
            meters.route("POST /matched/{id}").route(),
            "POST /matched/{id}"
        );
        let again = meters.route("POST /matched/{id}");
        assert!(Arc::ptr_eq(&again, &meters.route("POST /matched/{id}")));
        assert_eq!(meters.uncovered().route(), UNCOVERED);
    }
}
