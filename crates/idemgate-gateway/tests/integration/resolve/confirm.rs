//! `idemgate resolve` asks on a terminal, and takes over the record only if it is still
//! what it showed: a record a gateway changed between show and confirmation is kept.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{crash_with, PATH};
use crate::admin::json;
use crate::faults::harness::{Backend, Store};
use crate::support::*;

/// `resolve` on a pseudo-terminal (util-linux `script`) shows the stuck record and asks; a
/// gateway with `lease_expired = "takeover"` takes the record over and completes it before
/// the operator types `yes`: the command refuses, and the record keeps the gateway's answer.
async fn changed_before_confirmation_is_kept(backend: Backend) {
    let Some(store) = Store::new(backend).await else {
        return;
    };
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemgate.toml");
    let k = key();
    crash_with(&store, &up, &config, &[("alice", &k)], async {}).await;
    let line = format!(
        "{} resolve --config {} --key {k} --status 201 --operator ops-alice",
        env!("CARGO_BIN_EXE_idemgate"),
        config.display()
    );
    let mut cmd = tokio::process::Command::new("script");
    cmd.arg("-qec")
        .arg(line)
        .arg("/dev/null")
        .env("TERM", "dumb");
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    let Ok(mut child) = cmd.spawn() else {
        println!("skipping: `script` (util-linux) is not installed");
        return;
    };
    let mut stdout = child.stdout.take().unwrap();
    let shown = read_until(&mut stdout, "Type yes").await;
    assert!(
        shown.contains("stuck") && shown.contains("status 201"),
        "{shown}"
    );

    let gw = gateway(&up.base, &store.url, |c| {
        store.configure(c);
        c.defaults.set("lease_expired", "takeover");
    })
    .await;
    let retry = post(&gw.base, PATH, Some(&k), "{}").send().await.unwrap();
    assert_eq!(retry.status(), 201, "the gateway took the record over");
    assert_eq!(up.count(), 2);

    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"yes\n").await.unwrap();
    let rest = read_until(&mut stdout, "changed since it was shown").await;
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    assert!(!status.unwrap().unwrap().success(), "{shown}{rest}");
    let now = json(&config, &["inspect", "--key", &k, "--show-body"]).await;
    let rec = &now["records"][0];
    assert_eq!(rec["state"], "completed", "{now}");
    assert!(
        rec["resolved"].is_null(),
        "the gateway's answer stands: {now}"
    );
    assert!(
        rec["body"].as_str().unwrap().contains("\"execution\":2"),
        "{now}"
    );
    gw.stop().await;
    store.cleanup().await;
}

/// Reads `out` until the text read holds `needle` (10 s at most); the text.
async fn read_until(out: &mut tokio::process::ChildStdout, needle: &str) -> String {
    let mut text = String::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !text.contains(needle) {
        let read = tokio::time::timeout_at(deadline, out.read(&mut buf)).await;
        match read {
            Ok(Ok(n)) if n > 0 => text.push_str(&String::from_utf8_lossy(&buf[..n])),
            _ => panic!("`{needle}` never came: {text}"),
        }
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_record_changed_before_confirmation_is_kept() {
    changed_before_confirmation_is_kept(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_record_changed_before_confirmation_is_kept() {
    changed_before_confirmation_is_kept(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_record_changed_before_confirmation_is_kept() {
    changed_before_confirmation_is_kept(Backend::Redis).await;
}
