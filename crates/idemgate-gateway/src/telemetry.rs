//! The gateway's Prometheus exporter: latency histograms with fixed buckets (so they sum
//! across gateways, unlike summaries' quantiles) and HELP text on every metric.

use std::sync::OnceLock;

use metrics::{describe_counter, describe_gauge};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// The Prometheus recorder, installed once per process with
/// [`idemgate_tower::metrics::LATENCY_BUCKETS`] for every `*_duration_seconds` histogram,
/// and every metric described. `None` when another recorder was installed first.
pub fn prometheus() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE.get_or_init(install).as_ref()
}

fn install() -> Option<PrometheusHandle> {
    let builder = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Suffix("_duration_seconds".into()),
            &idemgate_tower::metrics::LATENCY_BUCKETS,
        )
        .ok()?;
    let handle = builder.install_recorder().ok()?;
    idemgate_tower::metrics::describe();
    describe();
    Some(handle)
}

/// HELP text of the gateway's own metrics: the purge and the store gauges (refreshed every
/// `gauges_interval`, labelled `backend`).
fn describe() {
    let counters = [
        (
            "idempotency_purged_records_total",
            "Expired records deleted by the purge (in-process or `idemgate purge`).",
        ),
        (
            "idempotency_purge_runs_total",
            "Purge runs by result (ok, error).",
        ),
        (
            "idempotency_store_gauges_errors_total",
            "Failed reads of the store gauges.",
        ),
    ];
    for (name, help) in counters {
        describe_counter!(name, help);
    }
    let gauges = [
        ("idempotency_records", "Records held, by state (in_progress, completed, failed)."),
        ("idempotency_record_body_bytes", "Bytes of stored response bodies (SQLite, Redis)."),
        ("idempotency_expired_records", "Records past their expiry not yet purged (always 0 on Redis, which expires keys itself)."),
        ("idempotency_stuck_in_progress_records", "Live in-progress records whose lease lapsed: their holder died."),
        ("idempotency_oldest_record_age_seconds", "Age of the oldest record, in seconds."),
        ("idempotency_store_table_bytes", "Size of the records table with its indexes, in bytes (PostgreSQL)."),
        ("idempotency_store_dead_rows", "Dead rows of the records table waiting for autovacuum (PostgreSQL)."),
        ("idempotency_store_gauges_approximate", "1 when the store gauges are estimates (large PostgreSQL tables, sampled Redis)."),
        ("idempotency_purge_last_duration_seconds", "Duration of the last purge run, in seconds."),
        ("idempotency_purge_last_success_timestamp_seconds", "Unix time of the last successful purge run, in seconds."),
    ];
    for (name, help) in gauges {
        describe_gauge!(name, help);
    }
}
