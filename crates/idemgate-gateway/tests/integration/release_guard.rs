//! `idemgate release` never lets a retry run beside an attempt, whatever the flags: a record
//! whose lease is live (a gateway is running its attempt now) is refused even with
//! `--force --upstream-stopped`, and a record whose state cannot be read (it may hold an
//! operation that ran) is released only with `--force`.

use std::time::Duration;

use crate::admin::idemgate;
use crate::faults::harness::{Backend, Damage, Store};
use crate::support::*;

/// A request the upstream answers after 3 s: the 1 s lease is renewed meanwhile.
const SLOW: &str = "/payments?delay_ms=3000";

async fn a_live_lease_is_never_released(backend: Backend) {
    let Some(store) = Store::new(backend).await else {
        return;
    };
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemgate.toml");
    let policy = "[defaults]\nlease_ttl = \"1s\"\n";
    std::fs::write(&config, format!("{}{policy}", store.toml())).unwrap();
    let gw = spawn_binary(&up.base, &config).await;
    let k = key();
    let first = tokio::spawn(post(&gw.base, SLOW, Some(&k), "{}").send());
    // Past the first lease: the holder renewed it, so it is live, not stuck.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let args = [
        "release",
        "--key",
        &k,
        "--yes",
        "--force",
        "--upstream-stopped",
    ];
    let refused = idemgate(&config, &args).await;
    assert!(!refused.status.success(), "a live lease was released");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("in flight") && stderr.contains("Nothing was released"),
        "{stderr}"
    );
    assert_eq!(first.await.unwrap().unwrap().status(), 201);
    let replay = post(&gw.base, SLOW, Some(&k), "{}").send().await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(up.count(), 1, "the operation ran once");
    drop(gw);
    store.cleanup().await;
}

/// Redis only: the SQL stores' CHECK constraints keep a state column readable.
async fn an_unreadable_record_needs_force(backend: Backend) {
    let Some(store) = Store::new(backend).await else {
        return;
    };
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemgate.toml");
    std::fs::write(&config, store.toml()).unwrap();
    let gw = spawn_binary(&up.base, &config).await;
    let k = key();
    let first = post(&gw.base, "/payments", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 201);
    store.damage(&k, Damage::BogusState).await;
    let refused = idemgate(&config, &["release", "--key", &k, "--yes"]).await;
    assert!(
        !refused.status.success(),
        "an unreadable record was released"
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("unreadable") && stderr.contains("--force"),
        "{stderr}"
    );
    let retry = post(&gw.base, "/payments", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_problem(retry, 500, "record-corrupt").await;
    assert_eq!(up.count(), 1, "kept: the retry did not run");
    drop(gw);
    store.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_live_lease_is_never_released() {
    a_live_lease_is_never_released(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_live_lease_is_never_released() {
    a_live_lease_is_never_released(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_live_lease_is_never_released() {
    a_live_lease_is_never_released(Backend::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_an_unreadable_record_needs_force() {
    an_unreadable_record_needs_force(Backend::Redis).await;
}
