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

/// HELP text of the gateway's own metrics (the purge and the SQLite record gauges).
fn describe() {
    describe_counter!(
        "idempotency_purged_records_total",
        "Expired records deleted by the purge (in-process or `idemgate purge`)."
    );
    describe_gauge!(
        "idempotency_records",
        "Records held (SQLite only; refreshed with each purge)."
    );
    describe_gauge!(
        "idempotency_record_body_bytes",
        "Bytes of stored response bodies (SQLite only; refreshed with each purge)."
    );
    describe_gauge!(
        "idempotency_expired_records",
        "Expired records not yet purged (SQLite only; refreshed with each purge)."
    );
    describe_gauge!(
        "idempotency_stuck_in_progress_records",
        "In-progress records whose lease lapsed (SQLite only; refreshed with each purge)."
    );
    describe_gauge!(
        "idempotency_oldest_record_age_seconds",
        "Age of the oldest record, seconds (SQLite only; refreshed with each purge)."
    );
}
