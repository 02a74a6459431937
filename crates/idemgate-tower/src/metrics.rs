//! The layer's metrics, through the [`metrics`] facade: what each is ([`describe`]) and the
//! per-route handles the hot path uses ([`RouteMetrics`]).
//!
//! Labels are the route template (`POST /payments/{id}`, `(unmatched)` for a covered
//! request that matches no route, `(uncovered)` for a method the layer does not cover) and a
//! fixed outcome or status class: never a key, a principal or a raw path, so the number of
//! series is bounded by the configuration.
//!
//! Handles are resolved against the recorder installed when the layer is built (install the
//! recorder first) and once per (route, outcome): a request allocates no label vector.
//!
//! Every counter series the layer and its lifecycle can emit ([`series`]) is registered at 0
//! when the layer wraps a service ([`register`]): per configured route, [`UNMATCHED`] and
//! [`UNCOVERED`], so an alert on `increase(...)` fires on a process's first event too.
//! Templates axum matches that no configured route names are registered when first seen.

use idemgate_core::counters::{lifecycle_series, CounterSpec, Series};

use crate::policy::Policy;

/// The route label of requests whose method the layer does not cover.
pub const UNCOVERED: &str = "(uncovered)";
/// The route label of covered requests that match no configured route.
pub const UNMATCHED: &str = "(unmatched)";

/// Every value of the `outcome` label of `idempotency_requests_total` and
/// `idempotency_request_duration_seconds`.
pub const OUTCOMES: [&str; 17] = [
    "acquired",
    "takeover",
    "replayed",
    "conflict",
    "mismatch",
    "previous_failed",
    "previous_released",
    "not_kept",
    "outcome_unknown",
    "record_corrupt",
    "store_unavailable",
    "fail_open",
    "bypassed",
    "limited",
    "rejected",
    "upstream_error",
    "client_gone",
];

/// The outcomes `idempotency_requests_total` counts: [`OUTCOMES`] but `upstream_error` and
/// `client_gone`, which only the durations (and the access log) carry.
pub const REQUEST_OUTCOMES: &[&str] = OUTCOMES.split_at(15).0;

/// Every value of the `limit` label of `idempotency_limited_total`.
pub const LIMITS: [&str; 2] = ["in_flight", "new_keys"];

/// Covered requests, by `route` and `outcome` ([`REQUEST_OUTCOMES`]).
pub const REQUESTS: &str = "idempotency_requests_total";
/// Upstream answers, by `route` and `class` ([`STATUS_CLASSES`]).
pub const UPSTREAM_RESPONSES: &str = "idempotency_upstream_responses_total";
/// Requests refused by a per-principal limit, by `route` and `limit` ([`LIMITS`]).
pub const LIMITED: &str = "idempotency_limited_total";

/// The counters of the layer itself (the lifecycle's are
/// [`LIFECYCLE_COUNTERS`](idemgate_core::counters::LIFECYCLE_COUNTERS)).
pub const COUNTERS: [CounterSpec; 4] = [
    CounterSpec {
        name: REQUESTS,
        help: "Covered requests by route template and outcome (acquired, takeover, replayed, conflict, mismatch, ...).",
    },
    CounterSpec {
        name: UPSTREAM_RESPONSES,
        help: "Upstream answers by route template and status class (1xx..5xx, or error when no response came).",
    },
    CounterSpec {
        name: LIMITED,
        help: "Requests refused by a per-principal limit, by route template and limit.",
    },
    CounterSpec {
        name: "idempotency_limit_table_full_total",
        help: "Requests refused because the per-principal limit table was full.",
    },
];

/// Every value of the `class` label of `idempotency_upstream_responses_total`: the status
/// class (RFC 9110 §15), or `error` when the upstream call failed without a response.
pub const STATUS_CLASSES: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "error"];

/// Upper bounds (seconds) of the latency histograms' buckets, for exporters that need them
/// (the gateway configures its Prometheus exporter with these): 1 ms to 30 s.
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Every counter series of route label `route` of covered requests: requests by outcome,
/// upstream answers by class, refusals by limit.
pub fn route_series(route: &str) -> Vec<Series> {
    let mut series = Series::new(REQUESTS)
        .with("route", route)
        .each("outcome", REQUEST_OUTCOMES);
    series.extend(upstream_series(route));
    series.extend(
        Series::new(LIMITED)
            .with("route", route)
            .each("limit", &LIMITS),
    );
    series
}

/// The counter series of upstream answers by class under route label `route` (all that
/// requests whose method is not covered count).
fn upstream_series(route: &str) -> Vec<Series> {
    Series::new(UPSTREAM_RESPONSES)
        .with("route", route)
        .each("class", &STATUS_CLASSES)
}

/// Every counter series a layer under `policy`, on a store whose backend is `backend`, can
/// emit: the lifecycle's, the layer's own, and [`route_series`] of every configured route
/// and [`UNMATCHED`] (templates axum matches that `policy` does not name are not known
/// before they are seen).
pub fn series(policy: &Policy, backend: &'static str) -> Vec<Series> {
    let mut series = lifecycle_series(backend);
    series.push(Series::new("idempotency_limit_table_full_total"));
    for (route, _) in policy.routes() {
        series.extend(route_series(route));
    }
    series.extend(route_series(UNMATCHED));
    series.extend(upstream_series(UNCOVERED));
    series
}

mod record;

pub(crate) use record::Meters;
pub use record::RouteMetrics;
pub use record::{describe, register};
pub(crate) use record::{limit_table_full, limited};

#[cfg(test)]
mod tests {
    use idemgate_core::counters::LIFECYCLE_COUNTERS;

    use super::*;

    #[test]
    fn series_cover_every_counter_and_route() {
        assert_eq!(REQUEST_OUTCOMES.len(), 15);
        assert!(!REQUEST_OUTCOMES.contains(&"upstream_error"));
        assert!(!REQUEST_OUTCOMES.contains(&"client_gone"));
        let policy = Policy::default()
            .with_route("POST /a/{id}", Default::default())
            .unwrap();
        let all = series(&policy, "sqlite");
        for counter in LIFECYCLE_COUNTERS.iter().chain(&COUNTERS) {
            assert!(
                all.iter().any(|s| s.name == counter.name),
                "{}",
                counter.name
            );
        }
        let per_route = REQUEST_OUTCOMES.len() + STATUS_CLASSES.len() + LIMITS.len();
        for route in ["POST /a/{id}", UNMATCHED] {
            let of_route = all
                .iter()
                .filter(|s| s.labels.first() == Some(&("route", route.to_owned())));
            assert_eq!(of_route.count(), per_route, "{route}");
        }
        let mismatch = Series::new(REQUESTS)
            .with("route", "POST /a/{id}")
            .with("outcome", "mismatch");
        assert!(all.contains(&mismatch));
        let uncovered = all
            .iter()
            .filter(|s| s.labels.contains(&("route", UNCOVERED.into())));
        assert!(uncovered.clone().all(|s| s.name == UPSTREAM_RESPONSES));
        assert_eq!(uncovered.count(), STATUS_CLASSES.len());
    }
}
