//! The key service's counters, each series registered at 0 when the service is built
//! ([`KeyService::new`](crate::KeyService::new) calls [`register`]), so that an alert on
//! `increase(...)` fires on the first event of a process: the core lifecycle's
//! ([`idemgate_core::counters`]), answers by endpoint and documented status, decisions by
//! client, refused tokens.

use idemgate_core::counters::{lifecycle_series, CounterSpec, Series, LIFECYCLE_COUNTERS};

use crate::KeyServiceSettings;

/// Answers by `endpoint` (the route, `other` for unknown paths) and `status`.
pub const REQUESTS: &str = "idempotency_key_service_requests_total";
/// `/v1/acquire` decisions by `client` and `decision` ([`DECISIONS`]).
pub const DECISIONS_TOTAL: &str = "idempotency_key_service_decisions_total";
/// Calls refused for a missing or unknown token.
pub const UNAUTHORIZED: &str = "idempotency_key_service_unauthorized_total";

/// Every value of the `decision` label of [`DECISIONS_TOTAL`].
pub const DECISIONS: [&str; 7] = [
    "run",
    "replay",
    "in_flight",
    "mismatch",
    "previous_failed",
    "outcome_unknown",
    "not_kept",
];

/// The key service's own counters (the lifecycle's are
/// [`LIFECYCLE_COUNTERS`]).
pub const COUNTERS: [CounterSpec; 3] = [
    CounterSpec {
        name: REQUESTS,
        help: "Key service answers by endpoint (the route; other for unknown paths) and status.",
    },
    CounterSpec {
        name: DECISIONS_TOTAL,
        help: "Acquire decisions by client and decision (run, replay, in_flight, mismatch, ...).",
    },
    CounterSpec {
        name: UNAUTHORIZED,
        help: "Key service calls refused for a missing or unknown bearer token.",
    },
];

/// Describes (HELP text) every counter of the key service and of its lifecycle, and its
/// request durations. Call it once after installing the recorder.
pub fn describe() {
    for counter in LIFECYCLE_COUNTERS.iter().chain(&COUNTERS) {
        counter.describe();
    }
    metrics::describe_histogram!(
        "idempotency_key_service_request_duration_seconds",
        metrics::Unit::Seconds,
        "Key service request durations by endpoint."
    );
}

/// Every counter series a key service with `settings` on a store whose backend is
/// `backend` can emit: the lifecycle's; answers for every (endpoint, status) pair the
/// OpenAPI document lists, and its own `200`; decisions for every configured client; refused
/// tokens.
pub fn series(settings: &KeyServiceSettings, backend: &'static str) -> Vec<Series> {
    let mut series = lifecycle_series(backend);
    series.push(Series::new(UNAUTHORIZED));
    for client in settings.clients.names() {
        let decisions = Series::new(DECISIONS_TOTAL).with("client", client);
        series.extend(decisions.each("decision", &DECISIONS));
    }
    for (endpoint, status) in documented_answers() {
        let answer = Series::new(REQUESTS).with("endpoint", endpoint);
        series.push(answer.with("status", status));
    }
    series
}

/// Registers every one of [`series`] at 0 with the installed recorder (series already there
/// keep their values).
pub fn register(settings: &KeyServiceSettings, backend: &'static str) {
    for s in series(settings, backend) {
        s.register();
    }
}

/// Every (endpoint, status) pair of the OpenAPI document, and `/v1/openapi.json`'s `200`.
fn documented_answers() -> Vec<(String, String)> {
    let doc = crate::openapi::document();
    let mut answers = vec![("/v1/openapi.json".to_owned(), "200".to_owned())];
    let paths = doc["paths"].as_object().into_iter().flatten();
    for (path, operations) in paths {
        let operations = operations.as_object().into_iter().flatten();
        for (_, operation) in operations {
            let responses = operation["responses"].as_object().into_iter().flatten();
            for (status, _) in responses {
                answers.push((path.clone(), status.clone()));
            }
        }
    }
    answers.sort();
    answers.dedup();
    answers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClientConfig, KeyServiceConfig};

    #[test]
    fn series_name_every_client_and_documented_answer() {
        let config = KeyServiceConfig {
            clients: vec![ClientConfig {
                name: "billing".into(),
                namespace: "payments".into(),
                token_sha256: "ab".repeat(32),
                ..Default::default()
            }],
            ..Default::default()
        };
        let settings = config.validate().unwrap();
        let all = series(&settings, "sqlite");
        for counter in LIFECYCLE_COUNTERS.iter().chain(&COUNTERS) {
            assert!(
                all.iter().any(|s| s.name == counter.name),
                "{}",
                counter.name
            );
        }
        let decisions = all.iter().filter(|s| s.name == DECISIONS_TOTAL);
        assert_eq!(decisions.count(), DECISIONS.len());
        let acquired = Series::new(REQUESTS)
            .with("endpoint", "/v1/acquire")
            .with("status", "200");
        assert!(all.contains(&acquired), "{all:?}");
        let corrupt = Series::new(REQUESTS)
            .with("endpoint", "/v1/acquire")
            .with("status", "500");
        assert!(all.contains(&corrupt));
    }
}
