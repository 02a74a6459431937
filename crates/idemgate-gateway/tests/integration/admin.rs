//! `idemgate inspect`, `release` and `stats` (the real binary) on every persistent store,
//! after a gateway was killed (SIGKILL) mid-request: the stuck key is shown, a retry gets
//! `outcome-unknown` until an operator releases it (with `--force`: its operation may have
//! run; and only once its attempt can no longer be running at the upstream, by the
//! gateway's `upstream_timeout`), then runs once; a completed record is only released with
//! `--force` too.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::faults::harness::{Backend, Store};
use crate::support::*;

/// Runs `idemgate <args> --config <config>` with no terminal on stdin.
pub(crate) async fn idemgate(config: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_idemgate"));
    cmd.args(args).arg("--config").arg(config);
    cmd.stdin(Stdio::null());
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// Runs a command expected to succeed with `--json`, and parses its output.
pub(crate) async fn json(config: &Path, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let out = idemgate(config, &args).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?} failed: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap()
}

const PATH: &str = "/payments?delay_ms=2000";

/// The gateway's wait for the API in these tests: longer than the 2 s requests, short
/// enough that a stuck record becomes releasable within seconds.
pub(crate) const UPSTREAM_TIMEOUT: &str = "upstream_timeout = \"3s\"\n";

/// Starts a gateway on `store` (1 s lease, default `lease_expired = "unknown"`, 3 s
/// `upstream_timeout`), kills it while the upstream runs a request with key `k`, and waits
/// past the lease.
async fn crash_mid_request(store: &Store, up: &Upstream, config: &Path, k: &str) {
    let policy = format!("{UPSTREAM_TIMEOUT}[defaults]\nlease_ttl = \"1s\"\n");
    std::fs::write(config, format!("{}{policy}", store.toml())).unwrap();
    let mut gw = spawn_binary(&up.base, config).await;
    let first = tokio::spawn(post(&gw.base, PATH, Some(k), "{}").send());
    // Until the upstream has it (a fixed 300 ms was too short on a loaded CI machine).
    for _ in 0..500 {
        if up.count() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(up.count(), 1, "the first request reached the upstream");
    gw.child.kill().unwrap(); // SIGKILL: no outcome is written, the lease is not renewed
    gw.child.wait().unwrap();
    assert!(first.await.unwrap().is_err());
    tokio::time::sleep(Duration::from_millis(1200)).await;
}

async fn a_stuck_key_is_inspected_and_released(backend: Backend) {
    let Some(store) = Store::new(backend).await else {
        return;
    };
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemgate.toml");
    let k = key();
    crash_mid_request(&store, &up, &config, &k).await;

    assert_stuck_key_shown(&config, &k).await;

    // until released, a retry gets outcome-unknown and nothing runs
    let gw = spawn_binary(&up.base, &config).await;
    let retry = post(&gw.base, PATH, Some(&k), "{}").send().await.unwrap();
    assert_problem(retry, 500, "outcome-unknown").await;
    assert_eq!(up.count(), 1);

    refused_while_it_may_run(&config, &k).await;
    // no terminal and no --yes: refused, nothing removed
    let refused = idemgate(&config, &["release", "--key", &k, "--force"]).await;
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("--yes"), "{stderr}");
    // in_progress: the operation may have run, so not without --force
    let refused = idemgate(&config, &["release", "--key", &k, "--yes"]).await;
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("the operation may have run; the next retry runs it again"),
        "{stderr}"
    );
    assert!(
        stderr.contains("--force") && stderr.contains("resolve"),
        "{stderr}"
    );
    assert_eq!(
        json(&config, &["inspect", "--key", &k]).await["records"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    let released = json(&config, &["release", "--key", &k, "--yes", "--force"]).await;
    assert_eq!(released["records"][0]["outcome"], "released", "{released}");
    let retry = post(&gw.base, PATH, Some(&k), "{}").send().await.unwrap();
    assert_eq!(retry.status(), 201, "the retry proceeds after the release");
    assert_eq!(up.count(), 2, "the upstream ran it once more");
    let replay = post(&gw.base, PATH, Some(&k), "{}").send().await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(up.count(), 2);

    assert_completed_needs_force(&config, &k).await;
    drop(gw);
    store.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_stuck_key_is_inspected_and_released() {
    a_stuck_key_is_inspected_and_released(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stuck_key_is_inspected_and_released() {
    a_stuck_key_is_inspected_and_released(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stuck_key_is_inspected_and_released() {
    a_stuck_key_is_inspected_and_released(Backend::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_and_bad_flags_are_refused_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemgate.toml");
    std::fs::write(&config, "store = \"memory://\"\n").unwrap();
    let out = idemgate(&config, &["stats"]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("memory://"));
    let db = dir.path().join("idemgate.db");
    std::fs::write(&config, format!("store = \"sqlite://{}\"\n", db.display())).unwrap();
    let out = idemgate(&config, &["inspect", "--key", "bad key\u{7f}"]).await;
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--key"),
        "{out:?}"
    );
    let out = idemgate(
        &config,
        &["inspect", "--key", "key-00000001", "--authorization", " "],
    )
    .await;
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--authorization"),
        "{out:?}"
    );
    let out = idemgate(&config, &["stats"]).await;
    assert!(
        !out.status.success(),
        "a missing SQLite file is not created"
    );
    assert!(!db.exists());
}

/// `inspect` (by key alone, and by route and the caller's header) and `stats` show the
/// stuck record of `k`.
async fn assert_stuck_key_shown(config: &Path, k: &str) {
    let (config, k) = (config, k.to_owned());
    // inspect by key alone (a scan), then by key, route and the caller's header
    let all = json(config, &["inspect", "--key", &k]).await;
    let records = all["records"].as_array().unwrap();
    assert_eq!(records.len(), 1, "{all}");
    let route = records[0]["route"].as_str().unwrap().to_owned();
    let scoped = [
        "inspect",
        "--key",
        &k,
        "--route",
        &route,
        "--authorization",
        "Bearer alice",
    ];
    let one = json(config, &scoped).await;
    let rec = &one["records"][0];
    assert_eq!(rec["state"], "in_progress", "{one}");
    assert_eq!(rec["condition"], "stuck", "the lease lapsed: {one}");
    assert_eq!(rec["fence"], 1);
    assert_eq!(rec["lease_token"].as_str().unwrap().len(), 8);
    assert!(rec["problem"].is_null() && rec.get("body").is_none());
    let other = ["inspect", "--key", &k, "--authorization", "Bearer bob"];
    assert_eq!(json(config, &other).await["records"], Value::Array(vec![]));
    let stats = json(config, &["stats"]).await;
    assert_eq!(stats["by_state"]["in_progress"], 1, "{stats}");
    assert_eq!(stats["stuck_in_progress"], 1, "{stats}");
    route_typo_noted(config, &k).await;
}

/// `inspect --route` with a route that is not one of `--config`'s templates and matches
/// nothing says so on stderr (the exit stays 0: no record is not an error); the help of
/// `--authorization` names the route's principal source.
async fn route_typo_noted(config: &Path, k: &str) {
    let typo = idemgate(config, &["inspect", "--key", k, "--route", "POST /payment"]).await;
    assert!(typo.status.success());
    assert!(String::from_utf8_lossy(&typo.stdout).contains("no record matches"));
    let note = String::from_utf8_lossy(&typo.stderr);
    assert!(
        note.contains("note: `POST /payment` is not a route configured in"),
        "{note}"
    );
    let uncovered = idemgate(config, &["inspect", "--key", k, "--route", "GET /payments"]).await;
    let note = String::from_utf8_lossy(&uncovered.stderr);
    assert!(note.contains("GET is not a covered method"), "{note}");
    let help = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["inspect", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("principal source of --route"), "{help}");
    assert!(!help.contains("default principal source does"), "{help}");
}

/// `release` refuses the completed record of `k` without `--force`; `stats` counts it;
/// `--force` releases it.
async fn assert_completed_needs_force(config: &Path, k: &str) {
    let (config, k) = (config, k.to_owned());
    // a completed record is only released with --force
    let refused = idemgate(config, &["release", "--key", &k, "--yes"]).await;
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("--force"), "{stderr}");
    let stats = json(config, &["stats"]).await;
    assert_eq!(stats["by_state"]["completed"], 1, "{stats}");
    assert_eq!(stats["by_state"]["in_progress"], 0, "{stats}");
    assert_eq!(stats["records"], 1, "{stats}");
    let shown = json(config, &["inspect", "--key", &k, "--show-body"]).await;
    let rec = &shown["records"][0];
    assert_eq!(
        (rec["state"].as_str(), rec["status"].as_i64()),
        (Some("completed"), Some(201))
    );
    assert!(
        rec["body"].as_str().unwrap().contains("\"execution\":2"),
        "{shown}"
    );
    let forced = json(config, &["release", "--key", &k, "--yes", "--force"]).await;
    assert_eq!(forced["records"][0]["outcome"], "released");
    assert_eq!(
        json(config, &["inspect", "--key", &k]).await["records"],
        Value::Array(vec![])
    );
}

/// `release --force` of the stuck record of `k` while its attempt may still be running at
/// the upstream (inside `upstream_timeout` + 5 s of its lease, by the store's clock) is
/// refused, naming when it becomes releasable, and deletes nothing; `inspect` shows until
/// when. Returns once that time has passed.
async fn refused_while_it_may_run(config: &Path, k: &str) {
    let refused = idemgate(config, &["release", "--key", k, "--yes", "--force"]).await;
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    for says in [
        "may still be running at the upstream",
        "Releasable from",
        "upstream_timeout (3s, from --config)",
        "--upstream-stopped",
        "Nothing was released",
    ] {
        assert!(stderr.contains(says), "{says}: {stderr}");
    }
    assert!(!stderr.contains("idemgate audit"), "{stderr}");
    let shown = json(config, &["inspect", "--key", k]).await;
    let rec = &shown["records"][0];
    assert_eq!(rec["state"], "in_progress", "nothing was deleted: {shown}");
    let (now, until) = (
        shown["now"].as_i64().unwrap(),
        rec["may_run_until"].as_i64(),
    );
    let until = until.expect("inspect shows until when it may run");
    let lease = rec["lease_expires_at"].as_i64().unwrap();
    assert_eq!(until, lease + 3000 + 5000, "{shown}");
    assert!(until > now, "{shown}");
    let table = idemgate(config, &["inspect", "--key", k]).await;
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("may still be running at the upstream until"),
        "{table}"
    );
    tokio::time::sleep(Duration::from_millis((until - now) as u64 + 200)).await;
}
