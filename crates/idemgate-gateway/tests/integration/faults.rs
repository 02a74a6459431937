//! At most once under faults, on every persistent store: a store that blips while the
//! upstream answers, a store gone longer than the lease during a slow call, a store that
//! stops answering (black hole), and records damaged behind the gateway's back. Each test
//! counts upstream executions.
//!
//! PostgreSQL and Redis are reached through a [`Relay`] the test cuts; SQLite is "cut" by
//! another connection holding its write lock longer than the store's busy timeout.

use std::time::Duration;

use tokio::time::Instant;

use crate::support::*;

pub(crate) mod harness;
use harness::{Backend, Damage, Store};

/// The store is cut 300 ms into a 1.5 s upstream call and comes back 2.5 s later: the
/// outcome write outlasts the outage, the client gets the upstream's answer, and retries get
/// the replay; the upstream ran once.
async fn store_blip_while_the_upstream_answers(backend: Backend) {
    let Some(store) = Store::new(backend).await else {
        return;
    };
    let up = upstream().await;
    let gw = gateway(&up.base, &store.url, |c| store.configure(c)).await;
    let k = key();
    let path = "/payments?delay_ms=1500";
    let first = tokio::spawn(post(&gw.base, path, Some(&k), "{}").send());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let outage = store.outage_start().await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    store.outage_end(outage).await;
    let first = first.await.unwrap().unwrap();
    assert_eq!(
        first.status(),
        201,
        "the first client gets the upstream's answer"
    );
    let replay = replay_within(&gw.base, path, &k, Duration::from_secs(10)).await;
    assert_eq!(replay.status(), 201);
    assert_eq!(up.count(), 1, "the upstream ran once");
    gw.stop().await;
    store.cleanup().await;
}

/// The store is gone for longer than the lease (1 s) while a 4 s call runs: retries get
/// `503`, `409` or `outcome-unknown`, never a second execution, and once the outcome lands
/// they get the replay.
async fn store_gone_longer_than_the_lease(backend: Backend) {
    let Some(store) = Store::new(backend).await else {
        return;
    };
    let up = upstream().await;
    let gw = gateway(&up.base, &store.url, |c| {
        store.configure(c);
        c.defaults.set("lease_ttl", "1s");
    })
    .await;
    let k = key();
    let path = "/payments?delay_ms=4000";
    let first = tokio::spawn(post(&gw.base, path, Some(&k), "{}").send());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let outage = store.outage_start().await;
    let started = Instant::now();
    let mut seen = Vec::new();
    while started.elapsed() < Duration::from_millis(2700) {
        seen.push(retry_status(&gw.base, path, &k).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    store.outage_end(outage).await;
    assert!(
        seen.iter().all(|s| [409, 500, 503].contains(s)),
        "retries during the outage: {seen:?}"
    );
    // The outcome lands before the first client is answered, so a retry may already get
    // the replay (0) while the first response is on its way.
    let mut after = Vec::new();
    while !first.is_finished() {
        after.push(retry_status(&gw.base, path, &k).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        after.iter().all(|s| [0, 409, 500, 503].contains(s)),
        "retries after the outage: {after:?}"
    );
    assert_eq!(first.await.unwrap().unwrap().status(), 201);
    replay_within(&gw.base, path, &k, Duration::from_secs(10)).await;
    assert_eq!(up.count(), 1, "never a second execution");
    gw.stop().await;
    store.cleanup().await;
}

/// A store that accepts connections and never answers: `503` within the store deadline
/// (2 s, plus slack), and nothing is forwarded, then or later.
async fn black_hole_store_answers_503_in_time(backend: Backend) {
    let Some(store) = Store::new(backend).await else {
        return;
    };
    let up = upstream().await;
    let gw = gateway(&up.base, &store.url, |c| store.configure(c)).await;
    assert_eq!(
        post(&gw.base, "/payments", Some(&key()), "{}")
            .send()
            .await
            .unwrap()
            .status(),
        201
    );
    store.relay().black_hole();
    let k = key();
    let started = Instant::now();
    let resp = post(&gw.base, "/payments", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    let waited = started.elapsed();
    assert_problem(resp, 503, "store-unavailable").await;
    assert!(waited < Duration::from_secs(8), "answered after {waited:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        up.count(),
        1,
        "the refused request was never forwarded late"
    );
    store.relay().start_again();
    assert_eq!(status_once_recovered(&gw.base).await, 201);
    gw.stop().await;
    store.cleanup().await;
}

/// A completed record damaged behind the gateway's back answers `record-corrupt`, never a
/// replay; the upstream is not called again.
async fn damaged_records_are_never_replayed(backend: Backend) {
    let Some(store) = Store::new(backend).await else {
        return;
    };
    let up = upstream().await;
    let gw = gateway(&up.base, &store.url, |c| store.configure(c)).await;
    for damage in [
        Damage::TruncateBody,
        Damage::InvalidStatus,
        Damage::DropHeaders,
    ] {
        let k = key();
        let first = post(&gw.base, "/payments", Some(&k), "{\"amount\":1}")
            .send()
            .await
            .unwrap();
        assert_eq!(first.status(), 201);
        let runs = up.count();
        store.damage(&k, damage).await;
        let resp = post(&gw.base, "/payments", Some(&k), "{\"amount\":1}")
            .send()
            .await
            .unwrap();
        assert!(
            resp.headers().get("idempotent-replayed").is_none(),
            "{damage:?} replayed"
        );
        assert_problem(resp, 500, "record-corrupt").await;
        assert_eq!(up.count(), runs, "{damage:?}: not run again");
    }
    gw.stop().await;
    store.cleanup().await;
}

/// What [`retry_after_a_crash`] leaves: the restarted gateway and what the retry got.
struct Crashed {
    up: Upstream,
    resp: reqwest::Response,
    k: String,
    gw: Process,
    store: Store,
    _dir: tempfile::TempDir,
}

/// Kills the gateway (SIGKILL) while the upstream runs a request, restarts it on the same
/// store with `lease_expired`, and returns what a retry after the lease (1 s) got.
async fn retry_after_a_crash(backend: Backend, lease_expired: &str) -> Option<Crashed> {
    let store = Store::new(backend).await?;
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemgate.toml");
    let policy = format!("[defaults]\nlease_ttl = \"1s\"\nlease_expired = \"{lease_expired}\"\n");
    std::fs::write(&config, format!("{}{policy}", store.toml())).unwrap();
    let listen = crate::support::key_service::free_addr();
    let k = key();
    let mut gw = spawn_binary_on(&listen, &up.base, &config).await;
    let first = tokio::spawn(post(&gw.base, CRASH_PATH, Some(&k), "{}").send());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(up.count(), 1, "the first request reached the upstream");
    gw.child.kill().unwrap(); // SIGKILL: no outcome is written, the lease is not renewed
    gw.child.wait().unwrap();
    assert!(first.await.unwrap().is_err());

    let gw = spawn_binary_on(&listen, &up.base, &config).await;
    let resp = post(&gw.base, CRASH_PATH, Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 409, "the dead holder's lease still counts");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let resp = post(&gw.base, CRASH_PATH, Some(&k), "{}")
        .send()
        .await
        .unwrap();
    Some(Crashed {
        up,
        resp,
        k,
        gw,
        store,
        _dir: dir,
    })
}

const CRASH_PATH: &str = "/payments?delay_ms=2000";

async fn a_crashed_holder_means_outcome_unknown_by_default(backend: Backend) {
    let Some(c) = retry_after_a_crash(backend, "unknown").await else {
        return;
    };
    assert_problem(c.resp, 500, "outcome-unknown").await;
    let again = post(&c.gw.base, CRASH_PATH, Some(&c.k), "{}")
        .send()
        .await
        .unwrap();
    assert_problem(again, 500, "outcome-unknown").await;
    assert_eq!(c.up.count(), 1, "the operation ran once");
    drop(c.gw);
    c.store.cleanup().await;
}

async fn a_crashed_holder_is_taken_over_when_the_route_says_so(backend: Backend) {
    let Some(c) = retry_after_a_crash(backend, "takeover").await else {
        return;
    };
    assert_eq!(c.resp.status(), 201, "taken over after the lease expired");
    assert!(c.resp.headers().get("idempotent-replayed").is_none());
    assert_eq!(c.up.count(), 2);
    assert_eq!(
        c.up.last_headers()["idempotent-takeover"],
        "true",
        "the upstream is told"
    );
    let replay = post(&c.gw.base, CRASH_PATH, Some(&c.k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    drop(c.gw);
    c.store.cleanup().await;
}

/// Duplicates that wait on another gateway (`on_in_flight = "wait"`) when the holder's
/// process is killed (SIGKILL: no outcome, no release, no renewal): each gets
/// `outcome-unknown` once the holder's lease (1 s) lapsed, and none runs the operation.
async fn a_killed_holder_gives_its_waiters_outcome_unknown_after_its_lease(backend: Backend) {
    let Some(store) = Store::new(backend).await else {
        return;
    };
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemgate.toml");
    let policy = "[defaults]\nlease_ttl = \"1s\"\non_in_flight = \"wait\"\nmax_wait = \"10s\"\n";
    std::fs::write(&config, format!("{}{policy}", store.toml())).unwrap();
    let mut holder =
        spawn_binary_on(&crate::support::key_service::free_addr(), &up.base, &config).await;
    let gw = gateway(&up.base, &store.url, |c| {
        store.configure(c);
        c.defaults.set("lease_ttl", "1s");
        c.defaults.set("on_in_flight", "wait");
        c.defaults.set("max_wait", "10s");
    })
    .await;
    let k = key();
    let first = tokio::spawn(post(&holder.base, CRASH_PATH, Some(&k), "{}").send());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(up.count(), 1, "the first request reached the upstream");
    let waiting: Vec<_> = (0..10)
        .map(|_| tokio::spawn(post(&gw.base, CRASH_PATH, Some(&k), "{}").send()))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    holder.child.kill().unwrap();
    holder.child.wait().unwrap();
    drop(first);
    for w in waiting {
        assert_problem(w.await.unwrap().unwrap(), 500, "outcome-unknown").await;
    }
    assert_eq!(up.count(), 1, "no waiter ran the operation");
    gw.stop().await;
    store.cleanup().await;
}

/// Retries `path` with key `k` until it is a replay, or panics after `within`.
async fn replay_within(base: &str, path: &str, k: &str, within: Duration) -> reqwest::Response {
    let started = Instant::now();
    loop {
        let resp = post(base, path, Some(k), "{}").send().await.unwrap();
        if resp.headers().get("idempotent-replayed").is_some() {
            return resp;
        }
        let status = resp.status().as_u16();
        assert!([409, 500, 503].contains(&status), "a retry got {status}");
        assert!(started.elapsed() < within, "no replay within {within:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The status of a retry, or `0` for a replay (the outcome landed): never a fresh `201`.
async fn retry_status(base: &str, path: &str, k: &str) -> u16 {
    let resp = post(base, path, Some(k), "{}").send().await.unwrap();
    match resp.headers().get("idempotent-replayed") {
        Some(_) => 0,
        None => resp.status().as_u16(),
    }
}

macro_rules! on_every_store {
    ($($case:ident),*) => {
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() { super::$case(super::Backend::Sqlite).await })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() { super::$case(super::Backend::Postgres).await })*
        }
        mod redis {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() { super::$case(super::Backend::Redis).await })*
        }
    };
}

on_every_store!(
    a_crashed_holder_means_outcome_unknown_by_default,
    a_killed_holder_gives_its_waiters_outcome_unknown_after_its_lease,
    a_crashed_holder_is_taken_over_when_the_route_says_so,
    store_blip_while_the_upstream_answers,
    store_gone_longer_than_the_lease,
    damaged_records_are_never_replayed
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn black_hole_postgres_answers_503_in_time() {
    black_hole_store_answers_503_in_time(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn black_hole_redis_answers_503_in_time() {
    black_hole_store_answers_503_in_time(Backend::Redis).await;
}
