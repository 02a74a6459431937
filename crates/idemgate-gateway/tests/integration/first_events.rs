//! Alerts fire on a process's first incident: a fresh `idemgate serve` and a fresh
//! `idemgate key-service` export every counter series they can emit at 0 (the list is the
//! code's own: `telemetry::gateway_series`, `telemetry::key_service_series`), no gauge
//! without a value, and every counter named in the sources, the README, `docs/` and
//! `deploy/` is one of those counters.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use idemgate_core::counters::{CounterSpec, Series, LIFECYCLE_COUNTERS};
use idemgate_gateway::config::Config;
use idemgate_gateway::telemetry;

use crate::support::key_service::{command, config_text, free_addr, wait_for};
use crate::support::*;

type Samples = HashMap<(String, BTreeMap<String, String>), f64>;

/// The samples of a Prometheus text exposition, by name and labels.
fn samples(text: &str) -> Samples {
    let mut out = HashMap::new();
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (series, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, labels(rest.strip_suffix('}').unwrap())),
            None => (series, BTreeMap::new()),
        };
        out.insert((name.to_owned(), labels), value.parse().unwrap());
    }
    out
}

/// `a="x",b="y"` (values escaped as the text format escapes them).
fn labels(mut s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    while let Some((key, rest)) = s.split_once("=\"") {
        let (mut value, mut chars) = (String::new(), rest.char_indices());
        let end = loop {
            match chars.next().unwrap() {
                (_, '\\') => match chars.next().unwrap().1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (i, '"') => break i,
                (_, c) => value.push(c),
            }
        };
        out.insert(key.trim_start_matches(',').to_owned(), value);
        s = &rest[end + 1..];
    }
    out
}

/// Asserts that `text` holds every one of `expected` at 0, and no other counter.
fn assert_all_at_zero(text: &str, expected: &[Series]) {
    let got = samples(text);
    for s in expected {
        let labels = s.labels.iter().map(|(k, v)| (k.to_string(), v.clone()));
        let key = (s.name.to_owned(), labels.collect());
        assert_eq!(got.get(&key), Some(&0.0), "{s:?} in:\n{text}");
    }
    let names: BTreeSet<&str> = expected.iter().map(|s| s.name).collect();
    for line in text.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
        if let Some(name) = line.strip_suffix(" counter") {
            assert!(names.contains(name), "{name} is exported but not listed");
        }
    }
}

#[tokio::test]
async fn a_fresh_gateway_exports_every_counter_at_zero() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("gw.db").display());
    // No purge or gauge read yet: nothing has happened in this process.
    let text = format!(
        "upstream = \"http://127.0.0.1:9\"\nstore = \"{store}\"\n\
         purge_interval = \"0s\"\ngauges_interval = \"0s\"\n\
         [[routes]]\nroute = \"POST /payments/{{id}}\"\n\
         [[routes]]\nroute = \"POST /refunds\"\n"
    );
    let file = dir.path().join("gw.toml");
    std::fs::write(&file, &text).unwrap();
    let policy = idemgate_gateway::cli::validated(Config::from_toml(&text).unwrap())
        .unwrap()
        .base
        .policy;
    let (listen, admin) = (free_addr(), free_addr());
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["serve", "--listen", &listen])
        .args(["--admin-listen", &admin, "--config"])
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _process = Process {
        child,
        base: format!("http://{listen}"),
    };
    wait_for(&admin).await;
    let metrics = scrape(&format!("http://{admin}")).await;
    let expected = telemetry::gateway_series(&policy, "sqlite");
    for name in [
        "idempotency_outcome_unknown_total",
        "idempotency_record_corrupt_total",
        "idempotency_lease_lost_total",
        "idempotency_takeovers_total",
        "idempotency_purge_runs_total",
        "idempotency_purged_records_total",
    ] {
        assert!(expected.iter().any(|s| s.name == name), "{name}");
    }
    for route in ["POST /payments/{id}", "POST /refunds", "(unmatched)"] {
        let unavailable = Series::new("idempotency_requests_total")
            .with("route", route)
            .with("outcome", "store_unavailable");
        assert!(expected.contains(&unavailable), "{route}");
    }
    assert_all_at_zero(&metrics, &expected);
    // Gauges only once they have a value: a purge-success time of 0 would read "never".
    assert!(!metrics.contains("idempotency_purge_last_success_timestamp_seconds"));
}

#[tokio::test]
async fn a_fresh_key_service_exports_every_counter_at_zero() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("ks.db").display());
    let (listen, admin) = (free_addr(), free_addr());
    let extra = "purge_interval = \"0s\"\ngauges_interval = \"0s\"";
    let text = config_text(&store, &listen, extra).replace(
        "admin_listen = \"\"",
        &format!("admin_listen = \"{admin}\""),
    );
    let file = dir.path().join("ks.toml");
    std::fs::write(&file, &text).unwrap();
    let config = Config::from_toml(&text).unwrap();
    let settings = idemgate_gateway::key_service::resolve(config, &mut Vec::new())
        .unwrap()
        .service;
    let child = command(&file)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _process = Process {
        child,
        base: format!("http://{listen}"),
    };
    wait_for(&admin).await;
    let metrics = scrape(&format!("http://{admin}")).await;
    let expected = telemetry::key_service_series(&settings, "sqlite");
    let decisions = Series::new("idempotency_key_service_decisions_total")
        .with("client", "alpha")
        .with("decision", "outcome_unknown");
    assert!(expected.contains(&decisions));
    assert_all_at_zero(&metrics, &expected);
}

/// The counters every front door describes and registers.
fn described() -> BTreeSet<&'static str> {
    let lists: [&[CounterSpec]; 5] = [
        &LIFECYCLE_COUNTERS,
        &idemgate_tower::metrics::COUNTERS,
        &idemgate_key_service::counters::COUNTERS,
        &telemetry::COUNTERS,
        &[telemetry::CONFIG_RELOADS],
    ];
    lists
        .iter()
        .flat_map(|l| l.iter().map(|c| c.name))
        .collect()
}

/// Every word of `text` that names an idemgate counter (`idempotency_..._total`).
fn counter_words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("idempotency_") && w.ends_with("_total"))
        .map(str::to_owned)
        .collect()
}

/// The text of every file under `dir` (recursively) whose name ends with one of `exts`.
fn read_tree(dir: &std::path::Path, exts: &[&str]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten() {
            let path = entry.unwrap().path();
            let name = path.to_string_lossy().into_owned();
            if path.is_dir() && !name.ends_with("/target") {
                dirs.push(path);
            } else if exts.iter().any(|e| name.ends_with(e)) {
                out.push((name, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    out
}

/// A counter the code emits, or one the README, `docs/` or `deploy/` (alert rules,
/// dashboard) names, is described and registered at 0 by the front doors: a new counter
/// cannot be forgotten.
#[test]
fn every_counter_named_anywhere_is_registered_at_start_up() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for krate in std::fs::read_dir(root.join("crates")).unwrap() {
        files.extend(read_tree(&krate.unwrap().path().join("src"), &[".rs"]));
    }
    let emitted = files.iter().flat_map(|(_, t)| counter_words(t)).count();
    assert!(emitted >= 20, "the sources name {emitted} counters");
    files.extend(read_tree(&root.join("docs"), &[".md"]));
    files.extend(read_tree(&root.join("deploy"), &[".yml", ".json"]));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    files.push(("README.md".into(), readme));
    let described = described();
    for (file, text) in &files {
        for word in counter_words(text) {
            assert!(
                described.contains(word.as_str()),
                "{file} names `{word}`, which no front door registers at start-up"
            );
        }
    }
}
