//! `idemgate resolve` (the real binary) on every persistent store, after a gateway process
//! was killed (SIGKILL) in the middle of a slow upstream call and its lease lapsed: the
//! operator records the outcome the upstream's own records show, and the next retry, on a
//! restarted gateway, gets it as a replay without running the operation again; a
//! not-replayable outcome answers `410` with the operator's text; `release` of the stuck
//! record needs `--force`; a record that changed between show and confirmation is kept.
//! The late outcome of a holder that lost the store is refused at the store level
//! (`admin_resolve_fences_out_the_holder` in the store conformance suite).

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::admin::{idemgate, json, UPSTREAM_TIMEOUT};
use crate::faults::harness::{Backend, Store};
use crate::support::*;

mod confirm;

const PATH: &str = "/payments?delay_ms=2000";

/// What the upstream's own records showed the operator: the charge happened.
const BODY: &str = r#"{"id":"pay_1","status":"succeeded"}"#;

/// Runs `idemgate <args> --config <config>` with `RUST_LOG` set to `log`.
async fn idemgate_logging(config: &Path, args: &[&str], log: &str) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_idemgate"));
    cmd.args(args)
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", log);
    cmd.stdin(Stdio::null());
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// A POST of `key` by `who` (`Authorization: Bearer <who>`), like [`post`]'s.
fn post_as(base: &str, who: &str, key: &str) -> reqwest::RequestBuilder {
    client()
        .post(format!("{base}{PATH}"))
        .header("authorization", format!("Bearer {who}"))
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body("{}")
}

/// Writes the config (1 s lease, `lease_expired = "unknown"`, 3 s `upstream_timeout`),
/// starts a gateway process,
/// sends one slow request per (caller, key), runs `during` while they are in the upstream,
/// kills the gateway with SIGKILL and waits past the lease: the records are stuck.
async fn crash_with<F: std::future::Future<Output = ()>>(
    store: &Store,
    up: &Upstream,
    config: &Path,
    requests: &[(&str, &str)],
    during: F,
) {
    std::fs::write(
        config,
        format!(
            "{}{UPSTREAM_TIMEOUT}[defaults]\nlease_ttl = \"1s\"\n",
            store.toml()
        ),
    )
    .unwrap();
    let mut gw = spawn_binary(&up.base, config).await;
    let sent: Vec<_> = requests
        .iter()
        .map(|(who, k)| tokio::spawn(post_as(&gw.base, who, k).send()))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        up.count(),
        requests.len(),
        "every request reached the upstream"
    );
    during.await;
    gw.child.kill().unwrap(); // SIGKILL: no outcome is written, the lease is not renewed
    gw.child.wait().unwrap();
    for s in sent {
        assert!(s.await.unwrap().is_err(), "the client lost its connection");
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `resolve` of `k` while its request runs (a live lease) is refused.
async fn refused_while_live(config: &Path, k: &str) {
    let out = idemgate(config, &["resolve", "--key", k, "--status", "201", "--yes"]).await;
    assert!(!out.status.success());
    assert!(stderr(&out).contains("live lease"), "{}", stderr(&out));
}

async fn a_stuck_key_is_resolved(backend: Backend) {
    let Some(store) = Store::new(backend).await else {
        return;
    };
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemgate.toml");
    let k = key();
    crash_with(
        &store,
        &up,
        &config,
        &[("alice", &k)],
        refused_while_live(&config, &k),
    )
    .await;

    // release of the stuck record without --force: refused, nothing deleted
    let refused = idemgate(&config, &["release", "--key", &k, "--yes"]).await;
    assert!(!refused.status.success());
    let text = stderr(&refused);
    assert!(
        text.contains("the operation may have run; the next retry runs it again"),
        "{text}"
    );
    let shown = json(&config, &["inspect", "--key", &k]).await;
    assert_eq!(shown["records"][0]["condition"], "stuck", "{shown}");

    let body = dir.path().join("body.json");
    std::fs::write(&body, BODY).unwrap();
    let body = body.display().to_string();
    let args = [
        "resolve",
        "--key",
        &k,
        "--status",
        "201",
        "--body-file",
        &body,
        "--header",
        "Content-Type: application/json",
        "--header",
        "location: /payments/pay_1",
        "--yes",
        "--operator",
        "ops-alice",
        "--json",
    ];
    let out = idemgate_logging(&config, &args, "info").await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_audit_logged(&stderr(&out), "resolved", "in_progress (stuck), fence 1");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rec = &doc["records"][0];
    assert_eq!(
        (rec["outcome"].as_str(), rec["fence"].as_i64()),
        (Some("resolved"), Some(2))
    );
    assert_eq!(rec["resolved"]["by"], "ops-alice", "{doc}");
    assert_eq!(rec["resolved"]["from_state"], "in_progress");
    assert_eq!(
        (
            rec["resolved"]["from_fence"].as_i64(),
            rec["status"].as_i64()
        ),
        (Some(1), Some(201))
    );

    // a restarted gateway replays the operator's answer; the upstream never runs again
    let gw = spawn_binary(&up.base, &config).await;
    for _ in 0..2 {
        let retry = post(&gw.base, PATH, Some(&k), "{}").send().await.unwrap();
        assert_eq!(retry.status(), 201);
        let h = retry.headers();
        assert_eq!(h["idempotent-replayed"], "true");
        assert_eq!(h["content-type"], "application/json");
        assert_eq!(h["location"], "/payments/pay_1");
        assert!(
            h.get("idempotent-resolved").is_none(),
            "the audit entry is not replayed"
        );
        assert_eq!(retry.text().await.unwrap(), BODY);
    }
    assert_eq!(up.count(), 1, "the operation ran once");
    let table = idemgate(&config, &["inspect", "--key", &k]).await;
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("resolved by ops-alice"), "{table}");
    assert!(table.contains("was in_progress (fence 1)"), "{table}");
    drop(gw);
    store.cleanup().await;
}

/// The `warn` event and the plain audit line of one override are both on stderr.
fn assert_audit_logged(text: &str, action: &str, from: &str) {
    let plain = format!("idemgate audit: {action} by=\"ops-alice\"");
    assert!(text.contains(&plain), "the plain line: {text}");
    assert!(text.contains(&format!("from=\"{from}\"")), "{text}");
    assert!(
        text.contains("WARN") && text.contains("idemgate::audit"),
        "{text}"
    );
    assert!(text.contains("operator override"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_stuck_key_is_resolved_after_kill_9() {
    a_stuck_key_is_resolved(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_stuck_key_is_resolved_after_kill_9() {
    a_stuck_key_is_resolved(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_stuck_key_is_resolved_after_kill_9() {
    a_stuck_key_is_resolved(Backend::Redis).await;
}

/// Two callers' stuck records under one key: `resolve` needs exactly one; bob's is resolved
/// as not replayable (his retries get `410` with the text), alice's stays stuck
/// (`outcome-unknown`); the audit line is written with logging off.
async fn not_replayable_answers_410(backend: Backend) {
    let Some(store) = Store::new(backend).await else {
        return;
    };
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemgate.toml");
    let k = key();
    let both = [("alice", k.as_str()), ("bob", k.as_str())];
    crash_with(&store, &up, &config, &both, async {}).await;
    let detail = "Charged once; the receipt is in the dashboard";
    let mut args = vec![
        "resolve",
        "--key",
        &k,
        "--status",
        "201",
        "--not-replayable",
    ];
    args.extend(["--detail", detail, "--yes", "--operator", "ops-alice"]);
    let two = idemgate(&config, &args).await;
    assert!(!two.status.success());
    assert!(stderr(&two).contains("2 records match"), "{}", stderr(&two));
    args.extend(["--authorization", "Bearer bob"]);
    let out = idemgate_logging(&config, &args, "off").await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stderr(&out);
    assert!(
        text.contains("idemgate audit: resolved by=\"ops-alice\""),
        "{text}"
    );
    assert!(text.contains("not replayable"), "{text}");
    assert!(
        !text.contains("WARN"),
        "RUST_LOG=off: only the plain line: {text}"
    );

    let gw = spawn_binary(&up.base, &config).await;
    let bob = post_as(&gw.base, "bob", &k).send().await.unwrap();
    let problem = assert_problem(bob, 410, "response-not-kept").await;
    let said = problem["detail"].as_str().unwrap();
    assert!(
        said.contains(detail) && said.contains("status 201"),
        "{problem}"
    );
    let alice = post_as(&gw.base, "alice", &k).send().await.unwrap();
    assert_problem(alice, 500, "outcome-unknown").await;
    assert_eq!(up.count(), 2, "nothing ran again");
    let shown = json(
        &config,
        &["inspect", "--key", &k, "--authorization", "Bearer bob"],
    )
    .await;
    let resolved = &shown["records"][0]["resolved"];
    assert_eq!(
        (
            resolved["replayable"].as_bool(),
            resolved["detail"].as_str()
        ),
        (Some(false), Some(detail))
    );

    // alice's did not run (say the upstream's records); her request may still be running at
    // the upstream, so release --force alone is refused and nothing is deleted
    let mut release = vec![
        "release",
        "--key",
        &k,
        "--authorization",
        "Bearer alice",
        "--yes",
        "--force",
        "--operator",
        "ops-alice",
    ];
    let out = idemgate_logging(&config, &release, "info").await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--upstream-stopped"),
        "{}",
        stderr(&out)
    );
    let kept = ["inspect", "--key", &k, "--authorization", "Bearer alice"];
    assert_eq!(
        json(&config, &kept).await["records"][0]["state"],
        "in_progress"
    );
    // crash_with returned 1.5 s after the 2 s requests were sent: past this, the API (the
    // test upstream, which no one stops) has answered them, so it can no longer be running
    // them, which is what --upstream-stopped asserts
    tokio::time::sleep(Duration::from_millis(600)).await;
    release.push("--upstream-stopped");
    let out = idemgate_logging(&config, &release, "info").await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_audit_logged(&stderr(&out), "released", "in_progress (stuck), fence 1");
    assert!(
        stderr(&out).contains("--upstream-stopped: the operator says"),
        "{}",
        stderr(&out)
    );
    let alice = post_as(&gw.base, "alice", &k).send().await.unwrap();
    assert_eq!(alice.status(), 201, "the released key runs");
    assert_eq!(up.count(), 3);
    drop(gw);
    store.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_not_replayable_resolution_answers_410() {
    not_replayable_answers_410(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_not_replayable_resolution_answers_410() {
    not_replayable_answers_410(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_not_replayable_resolution_answers_410() {
    not_replayable_answers_410(Backend::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_refuses_memory_and_bad_outcomes() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemgate.toml");
    std::fs::write(&config, "store = \"memory://\"\n").unwrap();
    let args = [
        "resolve",
        "--key",
        "key-00000001",
        "--status",
        "201",
        "--yes",
    ];
    let out = idemgate(&config, &args).await;
    assert!(!out.status.success());
    assert!(stderr(&out).contains("memory://"), "{}", stderr(&out));
    for (extra, says) in [
        (
            &["--header", "idempotent-resolved: {}"][..],
            "never replayed",
        ),
        (&["--header", "set-cookie: a=b"][..], "never replayed"),
        (&["--header", "no colon"][..], "Name: value"),
        (&["--body-file", "/nonexistent/body"][..], "--body-file"),
        // read up to the stored-response limit, never without end
        (&["--body-file", "/dev/zero"][..], "more than"),
        (&["--not-replayable"][..], "--detail"),
    ] {
        let mut a = args.to_vec();
        a.extend_from_slice(extra);
        let out = idemgate(&config, &a).await;
        assert!(!out.status.success(), "{extra:?}");
        assert!(stderr(&out).contains(says), "{extra:?}: {}", stderr(&out));
    }
    let out = idemgate(
        &config,
        &[
            "resolve",
            "--key",
            "key-00000001",
            "--status",
            "304",
            "--yes",
        ],
    )
    .await;
    assert!(stderr(&out).contains("304"), "{}", stderr(&out));
    std::fs::write(&config, "store = \"idemgate://127.0.0.1:1\"\n").unwrap();
    let out = idemgate(&config, &args).await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("idemgate:// records live in the key service"),
        "{}",
        stderr(&out)
    );
}
