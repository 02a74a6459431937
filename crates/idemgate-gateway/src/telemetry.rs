//! The gateway's Prometheus exporter: latency histograms with fixed buckets (so they sum
//! across gateways, unlike summaries' quantiles) and HELP text on every metric; and the
//! counters each command registers at 0 at start-up ([`register_gateway`],
//! [`register_key_service`]), so that an alert on `increase(...)` fires on a process's
//! first event. Gauges appear once they have a value.

use std::sync::OnceLock;

use idemgate_core::counters::{CounterSpec, Series};
use idemgate_key_service::KeyServiceSettings;
use idemgate_tower::Policy;
use metrics::describe_gauge;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// The Prometheus recorder, installed once per process with
/// [`idemgate_tower::metrics::LATENCY_BUCKETS`] for every `*_duration_seconds` histogram,
/// and every metric described. `None` when another recorder was installed first.
///
/// A thread of its own runs the recorder's upkeep every [`UPKEEP_EVERY`]: it folds the
/// histograms' samples into their buckets, which otherwise pile up until `/metrics` is
/// scraped (about 300 MB an hour at 1,000 requests a second, never scraped).
pub fn prometheus() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE.get_or_init(install).as_ref()
}

/// How often the histograms' samples are folded into their buckets.
pub const UPKEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

fn install() -> Option<PrometheusHandle> {
    let builder = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Suffix("_duration_seconds".into()),
            &idemgate_tower::metrics::LATENCY_BUCKETS,
        )
        .ok()?;
    let handle = builder.install_recorder().ok()?;
    let upkept = handle.clone();
    let upkeep = move || loop {
        std::thread::sleep(UPKEEP_EVERY);
        upkept.run_upkeep();
    };
    let spawned = std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(upkeep);
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "no metrics upkeep thread: histograms grow until scraped");
    }
    idemgate_tower::metrics::describe();
    idemgate_key_service::counters::describe();
    describe();
    Some(handle)
}

/// Purge runs, by `result` ([`PURGE_RESULTS`]).
pub const PURGE_RUNS: &str = "idempotency_purge_runs_total";

/// Every value of the `result` label of [`PURGE_RUNS`].
pub const PURGE_RESULTS: [&str; 2] = ["ok", "error"];

/// The counters of the purge, the store gauges, the store's replication ([`FAILOVERS`],
/// [`UNCONFIRMED_WRITES`]), its forward journal ([`JOURNAL_COUNTERS`]) and the listeners'
/// connections ([`CONNECTIONS_LIMIT_REACHED`], [`CONNECTION_TIMEOUTS`],
/// [`CONNECTIONS_PARKED`]), in both commands.
pub const COUNTERS: [CounterSpec; 11] = [
    CounterSpec {
        name: "idempotency_purged_records_total",
        help: "Expired records deleted by the purge (in-process or `idemgate purge`).",
    },
    CounterSpec {
        name: PURGE_RUNS,
        help: "Purge runs by result (ok, error).",
    },
    CounterSpec {
        name: "idempotency_store_gauges_errors_total",
        help: "Failed reads of the store gauges and of what the store can lose.",
    },
    CounterSpec {
        name: FAILOVERS,
        help: "Failovers the store followed: a new primary behind its URL (PostgreSQL).",
    },
    CounterSpec {
        name: UNCONFIRMED_WRITES,
        help: "Store writes no replica confirmed in time, by op (PostgreSQL's require_synchronous_replication, Redis's redis_wait_replicas).",
    },
    CounterSpec {
        name: JOURNAL_COUNTERS[0],
        help: "Forward journal entries written back to the store after a failover that lost them (PostgreSQL, forward_journal_file).",
    },
    CounterSpec {
        name: JOURNAL_COUNTERS[1],
        help: "Forward journal entries dropped at forward_journal_window before a standby confirmed them: a failover now could run their keys again.",
    },
    CONNECTIONS_LIMIT_REACHED,
    CONNECTION_TIMEOUTS,
    CONNECTIONS_PARKED,
    ACCESS_LOG_DROPPED,
];

/// Open connections of a listener, by `listener` (`service`, `admin`): a gauge.
pub const CONNECTIONS_OPEN: &str = "idempotency_connections_open";

/// Times a listener had `max_connections` open and left new clients in the listen backlog,
/// by `listener`.
pub const CONNECTIONS_LIMIT_REACHED: CounterSpec = CounterSpec {
    name: "idempotency_connections_limit_reached_total",
    help: "Times a listener had max_connections open and left new connections waiting in the listen backlog, by listener (service, admin).",
};

/// Connections closed by a timeout, by `listener` and `timeout` ([`TIMEOUT_KINDS`]).
pub const CONNECTION_TIMEOUTS: CounterSpec = CounterSpec {
    name: "idempotency_connection_timeouts_total",
    help: "Connections closed by a timeout, by listener (service, admin) and timeout: header (header_read_timeout, answered 408), body (body_read_timeout, answered 408), idle (idle_timeout).",
};

/// Idle kept-alive HTTP/1 connections parked (hyper's buffers freed until the client's
/// next bytes), by `listener`.
pub const CONNECTIONS_PARKED: CounterSpec = CounterSpec {
    name: "idempotency_connections_parked_total",
    help: "Idle kept-alive HTTP/1 connections parked: their buffers freed until the client's next request, by listener (service, admin).",
};

/// Access log lines dropped because their queue was full ([`crate::logging`]).
pub const ACCESS_LOG_DROPPED: CounterSpec = CounterSpec {
    name: "idempotency_access_log_dropped_total",
    help: "Access log lines dropped because stderr fell behind and their queue was full (other log lines are never dropped).",
};

/// Every value of the `timeout` label of [`CONNECTION_TIMEOUTS`].
pub const TIMEOUT_KINDS: [&str; 3] = ["header", "body", "idle"];

/// The forward journal's counters (`forward_journal_file`): entries restored after a
/// failover, and entries dropped unconfirmed at `forward_journal_window`.
pub const JOURNAL_COUNTERS: [&str; 2] = [
    "idempotency_forward_journal_restored_total",
    "idempotency_forward_journal_expired_total",
];

/// Failovers the store followed, by `backend` (PostgreSQL's).
pub const FAILOVERS: &str = "idempotency_store_failovers_total";

/// Writes no replica confirmed in time, by `backend` and `op`.
pub const UNCONFIRMED_WRITES: &str = "idempotency_store_unconfirmed_writes_total";

/// The `op` values of [`UNCONFIRMED_WRITES`] each store counts (its write operations, as
/// named in `idempotency_store_duration_seconds`).
const UNCONFIRMED_OPS: [(&str, &[&str]); 2] = [
    (
        "postgres",
        &[
            "insert_or_get",
            "take_over",
            "renew",
            "complete",
            "fail",
            "release",
            "purge_expired",
        ],
    ),
    (
        "redis",
        &["insert_or_get", "take_over", "complete", "fail", "release"],
    ),
];

/// `SIGHUP` reloads of `idemgate serve`, by `result` ([`RELOAD_RESULTS`]).
pub const CONFIG_RELOADS: CounterSpec = CounterSpec {
    name: "idempotency_config_reloads_total",
    help: "SIGHUP configuration reloads by result: applied, refused (it would change requests' scope), invalid (the file has errors).",
};

/// Every value of the `result` label of [`CONFIG_RELOADS`]: `applied`, `refused` (the
/// file would change requests' scope) and `invalid` (the file has errors).
pub const RELOAD_RESULTS: [&str; 3] = ["applied", "refused", "invalid"];

/// Counts one reload with `result` (one of [`RELOAD_RESULTS`]).
pub fn count_reload(result: &'static str) {
    metrics::counter!(CONFIG_RELOADS.name, "result" => result).increment(1);
}

/// The counter series of [`COUNTERS`] (and the listeners' of both commands).
fn background_series() -> Vec<Series> {
    let mut series = Series::new(PURGE_RUNS).each("result", &PURGE_RESULTS);
    series.push(Series::new("idempotency_purged_records_total"));
    series.push(Series::new("idempotency_store_gauges_errors_total"));
    series.push(Series::new(ACCESS_LOG_DROPPED.name));
    let listeners = [crate::connections::SERVICE, crate::connections::ADMIN];
    for listener in listeners {
        let limit = Series::new(CONNECTIONS_LIMIT_REACHED.name).with("listener", listener);
        series.push(limit);
        let timeouts = Series::new(CONNECTION_TIMEOUTS.name).with("listener", listener);
        series.extend(timeouts.each("timeout", &TIMEOUT_KINDS));
        series.push(Series::new(CONNECTIONS_PARKED.name).with("listener", listener));
    }
    series
}

/// The replication counters a store of `backend` emits: PostgreSQL's failovers, and the
/// unconfirmed writes of PostgreSQL and Redis by `op`.
pub fn store_series(backend: &'static str) -> Vec<Series> {
    let mut series = Vec::new();
    if backend == "postgres" {
        series.push(Series::new(FAILOVERS).with("backend", backend));
    }
    for (_, ops) in UNCONFIRMED_OPS.iter().filter(|(b, _)| *b == backend) {
        series.extend(
            Series::new(UNCONFIRMED_WRITES)
                .with("backend", backend)
                .each("op", ops),
        );
    }
    series
}

/// Every counter series `idemgate serve` can emit under `policy` on a store whose backend
/// is `backend`: the layer's and its lifecycle's
/// ([`idemgate_tower::metrics::series`]), the purge's, the store gauges', the store's
/// replication ([`store_series`]) and the reloads'.
pub fn gateway_series(policy: &Policy, backend: &'static str) -> Vec<Series> {
    let mut series = idemgate_tower::metrics::series(policy, backend);
    series.extend(background_series());
    series.extend(store_series(backend));
    series.extend(Series::new(CONFIG_RELOADS.name).each("result", &RELOAD_RESULTS));
    series
}

/// Every counter series `idemgate key-service` can emit with `settings` on a store whose
/// backend is `backend`: the service's and its lifecycle's
/// ([`idemgate_key_service::counters::series`]), the purge's, the store gauges' and the
/// store's replication ([`store_series`]).
pub fn key_service_series(settings: &KeyServiceSettings, backend: &'static str) -> Vec<Series> {
    let mut series = idemgate_key_service::counters::series(settings, backend);
    series.extend(background_series());
    series.extend(store_series(backend));
    series
}

/// Registers every one of [`gateway_series`] at 0: the gateway's one place for it, called
/// at start-up after the recorder is installed. (The layer registers its own series again
/// whenever it wraps the proxy, so routes added by a reload start at 0 too.)
pub fn register_gateway(policy: &Policy, backend: &'static str) {
    // Only the gateway reloads: described here, not for the key service.
    CONFIG_RELOADS.describe();
    gateway_series(policy, backend)
        .iter()
        .for_each(Series::register);
}

/// Registers every one of [`key_service_series`] at 0: the key service command's one place
/// for it, called at start-up after the recorder is installed.
pub fn register_key_service(settings: &KeyServiceSettings, backend: &'static str) {
    key_service_series(settings, backend)
        .iter()
        .for_each(Series::register);
}

/// Registers [`JOURNAL_COUNTERS`] at 0: called at start-up by a process that keeps a
/// forward journal, so an alert on their increase fires on the first event.
pub fn register_forward_journal() {
    for name in JOURNAL_COUNTERS {
        Series::new(name).register();
    }
}

/// HELP text of the gateway's own metrics: the purge and the store gauges (refreshed every
/// `gauges_interval`, labelled `backend`).
fn describe() {
    for counter in COUNTERS {
        counter.describe();
    }
    let gauges = [
        ("idempotency_records", "Records held, by state (in_progress, completed, failed)."),
        ("idempotency_record_body_bytes", "Bytes of stored response bodies (SQLite and PostgreSQL below 100,000 records, Redis)."),
        ("idempotency_expired_records", "Records past their expiry not yet purged (always 0 on Redis, which expires keys itself)."),
        ("idempotency_stuck_in_progress_records", "Live in-progress records whose lease lapsed: their holder died."),
        ("idempotency_oldest_record_age_seconds", "Age of the oldest record, in seconds."),
        ("idempotency_store_table_bytes", "Size of the records table with its indexes, in bytes (PostgreSQL)."),
        ("idempotency_store_dead_rows", "Dead rows of the records table waiting for autovacuum (PostgreSQL)."),
        ("idempotency_store_gauges_approximate", "1 when the store gauges are estimates (large PostgreSQL tables, sampled Redis)."),
        ("idempotency_store_durability", "What a failure can lose, by level (replicated, local, volatile, unknown): 1 for the store's current level, 0 for the others."),
        ("idempotency_purge_last_duration_seconds", "Duration of the last purge run, in seconds."),
        ("idempotency_purge_last_success_timestamp_seconds", "Unix time of the last successful purge run, in seconds."),
        ("idempotency_forward_journal_entries", "Forward journal entries not yet confirmed by a standby (PostgreSQL, forward_journal_file)."),
        (CONNECTIONS_OPEN, "Open connections of a listener, by listener (service, admin); at most max_connections (128 on the admin listener)."),
    ];
    for (name, help) in gauges {
        describe_gauge!(name, help);
    }
}
