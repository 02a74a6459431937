//! `idemgate probe` against the gateway in front of the demo payments API, on SQLite,
//! PostgreSQL and Redis: every scenario runs (none skipped: every option it needs is
//! given, the key lifetime is short) and passes. From the binary: the exit codes and the
//! JSON report.

use idemgate_gateway::config::RouteTable;
use idemgate_probe::{ProbeArgs, Status};

use crate::support::{
    delete_redis_prefix, drop_pg_table, gateway, rand_u64, run_idemgate, test_url,
};

/// The probe's command line against `base`, its files in `dir`.
fn words(dir: &tempfile::TempDir, base: &str) -> Vec<String> {
    let (body, failing) = (dir.path().join("req.json"), dir.path().join("fail.json"));
    std::fs::write(&body, r#"{"amount": 1000, "currency": "EUR"}"#).unwrap();
    std::fs::write(
        &failing,
        r#"{"amount": 1000, "currency": "EUR", "fail_status": 500}"#,
    )
    .unwrap();
    [
        &format!("{base}/payments"),
        "--body-file",
        body.to_str().unwrap(),
        "--failing-body-file",
        failing.to_str().unwrap(),
        "-H",
        "Authorization: Bearer alice",
        "--second-principal-header",
        "Authorization: Bearer bob",
        "--second-url",
        &format!("{base}/ledger"),
        "--id-pointer",
        "/id",
    ]
    .map(str::to_owned)
    .to_vec()
}

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    probe: ProbeArgs,
}

/// Runs the probe against a gateway on `store` (after `edit`) in front of the demo API and
/// asserts that every scenario passed.
async fn every_scenario_passes(
    store: &str,
    edit: impl FnOnce(&mut idemgate_gateway::config::Config),
) {
    every_scenario_passes_storing(store, "full", edit).await;
}

/// [`every_scenario_passes`] with the route's `store_response` (`redacted` redacts `/id`).
async fn every_scenario_passes_storing(
    store: &str,
    form: &str,
    edit: impl FnOnce(&mut idemgate_gateway::config::Config),
) {
    let (api, _) = idemgate_demo::payments::spawn().await.unwrap();
    let gw = gateway(&api, store, |c| {
        let route = RouteTable::route("POST /payments")
            .with("key_required", true)
            .with("record_ttl", "4s")
            .with("lease_ttl", "2s")
            .with("record_ttl_header", true)
            .with("store_response", form);
        c.routes.push(match form {
            "redacted" => route.with("redact_json_pointers", vec!["/id"]),
            _ => route,
        });
        edit(c);
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut argv = vec!["probe".to_owned()];
    argv.extend(words(&dir, &gw.base));
    let args = <Cli as clap::Parser>::parse_from(argv).probe;
    let report = idemgate_probe::run(&args.resolve().unwrap(), None, |_| {})
        .await
        .unwrap();
    let table = report.table();
    assert!(report.passed, "{table}");
    assert!(report.scenarios.len() >= 30, "{table}");
    for s in &report.scenarios {
        assert_eq!(s.status, Status::Passed, "{}: {table}", s.name);
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_keeps_every_rule() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("idemgate.db").display());
    every_scenario_passes(&store, |_| {}).await;
}

/// Replays marked `Idempotent-Body-Omitted` or `Idempotent-Redacted` (the id itself
/// redacted) conform.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_forms_keep_every_rule() {
    for form in ["status-only", "redacted"] {
        let dir = tempfile::tempdir().unwrap();
        let store = format!("sqlite://{}", dir.path().join("idemgate.db").display());
        every_scenario_passes_storing(&store, form, |_| {}).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_keeps_every_rule() {
    let Some(url) = test_url("IDEMGATE_TEST_DATABASE_URL") else {
        return;
    };
    let table = format!("idem_probe_{:012x}", rand_u64() >> 16);
    every_scenario_passes(&url, |c| c.store_table = table.clone()).await;
    drop_pg_table(&url, &table).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_keeps_every_rule() {
    let Some(url) = test_url("IDEMGATE_TEST_REDIS_URL") else {
        return;
    };
    let prefix = format!("idem-probe-{:012x}:", rand_u64() >> 16);
    every_scenario_passes(&url, |c| c.store_key_prefix = prefix.clone()).await;
    delete_redis_prefix(&url, &prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_exits_non_zero_against_the_demo_api_alone() {
    let (api, _) = idemgate_demo::payments::spawn().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut argv = vec!["probe".to_owned(), "--json".to_owned()];
    argv.extend(words(&dir, &api));
    let (code, out) = tokio::task::spawn_blocking(move || run_idemgate(&argv))
        .await
        .unwrap();
    assert_eq!(code, 1, "{out}");
    let json_start = out.find('{').unwrap();
    let json_end = out.rfind('}').unwrap();
    let report: serde_json::Value = serde_json::from_str(&out[json_start..=json_end]).unwrap();
    assert_eq!(report["passed"], false);
    let replay = report["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "replay-same-request")
        .unwrap();
    assert_eq!(replay["status"], "failed");
    assert!(replay["detail"].as_str().unwrap().contains("ran twice"));
    assert!(out.contains("creates a real resource") || out.contains("create a real resource"));

    // No answer at all: exit 2 with the reason, nothing judged.
    let unreachable = ["probe", "http://127.0.0.1:9/payments"];
    let (code, out) = run_idemgate(&unreachable);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("error: http://127.0.0.1:9/payments:"), "{out}");
    let (code, out) = run_idemgate(&["probe", "ftp://x/y"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("URL: the scheme must be http or https"),
        "{out}"
    );
}
