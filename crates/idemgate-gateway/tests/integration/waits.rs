//! Duplicates that wait for the first request's outcome (`on_in_flight = "wait"`) instead of
//! getting `409`.

use std::ops::Not;
use std::time::Duration;

use tokio::time::Instant;

use idemgate_gateway::config::Config;
use tempfile::TempDir;

use crate::support::*;

/// A gateway on a fresh SQLite file whose duplicates wait, after `edit`.
async fn waiting_gateway(up: &Upstream, edit: impl FnOnce(&mut Config)) -> (Gateway, TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("idemgate.db").display());
    let gw = gateway(&up.base, &store, |c| {
        c.defaults.set("on_in_flight", "wait");
        edit(c);
    })
    .await;
    (gw, dir)
}

/// Serializes this module's tests: the waiters gauge they read counts every gateway of the
/// process, and only these tests make duplicates wait.
pub(crate) static GAUGE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Waits until `gw` reports `n` duplicates waiting (its `idempotency_waiters` gauge).
async fn until_waiting(gw: &Gateway, n: usize) {
    for _ in 0..200 {
        let text = scrape(&gw.admin).await;
        let gauge = text
            .lines()
            .find_map(|l| l.strip_prefix("idempotency_waiters "))
            .and_then(|v| v.trim().parse::<f64>().ok());
        if gauge == Some(n as f64) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{n} duplicates never waited");
}

/// Sends `n` duplicates of one keyed POST to `path` at once; their statuses, whether each
/// was marked replayed, and their bodies.
async fn duplicates(base: &str, path: &str, key: &str, n: usize) -> Vec<(u16, bool, String)> {
    let sends: Vec<_> = (0..n)
        .map(|_| tokio::spawn(post(base, path, Some(key), "{\"amount\":1}").send()))
        .collect();
    let mut answers = Vec::new();
    for send in sends {
        let resp = send.await.unwrap().unwrap();
        let replayed = resp.headers().contains_key("idempotent-replayed");
        answers.push((resp.status().as_u16(), replayed, resp.text().await.unwrap()));
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_duplicates_wait_for_the_one_run_and_get_its_response() {
    let _serial = GAUGE.lock().await;
    let up = upstream().await;
    let (gw, _dir) = waiting_gateway(&up, |_| {}).await;
    let answers = duplicates(&gw.base, "/payments?delay_ms=1500", &key(), 200).await;
    assert_eq!(up.count(), 1, "the upstream ran once");
    assert!(answers.iter().all(|(s, _, _)| *s == 201), "{answers:?}");
    let replayed = answers.iter().filter(|(_, r, _)| *r).count();
    assert_eq!(replayed, 199);
    let first = &answers.iter().find(|(_, r, _)| !r).unwrap().2;
    assert!(
        answers.iter().all(|(_, _, body)| body == first),
        "the same stored response"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_first_attempt_is_run_by_one_waiter_and_a_second_release_by_none() {
    let _serial = GAUGE.lock().await;
    let up = upstream().await;
    let (gw, _dir) = waiting_gateway(&up, |_| {}).await;
    // Every execution answers 503 (released by default): the first, then one waiter's. All
    // 19 duplicates wait before the first ends (one that arrived during the rerun would
    // have a try of its own, as a retry after the rerun's release would).
    let (k, path) = (key(), "/payments?delay_ms_seq=3000,700&status=503");
    let first = tokio::spawn(post(&gw.base, path, Some(&k), "{\"amount\":1}").send());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (base, k2) = (gw.base.clone(), k.clone());
    let waiting = tokio::spawn(async move { duplicates(&base, path, &k2, 19).await });
    until_waiting(&gw, 19).await;
    let mut answers = waiting.await.unwrap();
    let first = first.await.unwrap().unwrap();
    answers.push((first.status().as_u16(), false, first.text().await.unwrap()));
    assert_eq!(
        up.count(),
        2,
        "the first and exactly one waiter ran it: {answers:?}"
    );
    let upstream_503s = answers
        .iter()
        .filter(|(_, _, b)| b.contains("execution"))
        .count();
    assert_eq!(upstream_503s, 2, "{answers:?}");
    for (status, replayed, body) in &answers {
        assert_eq!(*status, 503, "{body}");
        assert!(!replayed, "a release is never a replay");
    }
    let released = answers
        .iter()
        .filter(|(_, _, b)| b.contains("previous-attempt-released"));
    assert_eq!(released.count(), 18, "{answers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_first_attempt_that_succeeds_on_its_rerun_is_replayed_to_the_rest() {
    let _serial = GAUGE.lock().await;
    let up = upstream().await;
    let (gw, _dir) = waiting_gateway(&up, |_| {}).await;
    let path = "/payments?delay_ms=700&first_status=503";
    let answers = duplicates(&gw.base, path, &key(), 20).await;
    assert_eq!(up.count(), 2);
    let statuses: Vec<_> = answers.iter().map(|(s, r, _)| (*s, *r)).collect();
    assert_eq!(
        statuses.iter().filter(|a| **a == (503, false)).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|a| **a == (201, false)).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|a| **a == (201, true)).count(),
        18,
        "{statuses:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_first_attempt_gives_waiters_previous_attempt_failed() {
    let _serial = GAUGE.lock().await;
    let up = upstream().await;
    let (gw, _dir) = waiting_gateway(&up, |_| {}).await;
    let answers = duplicates(&gw.base, "/payments?delay_ms=700&status=500", &key(), 10).await;
    assert_eq!(up.count(), 1);
    let failed = answers
        .iter()
        .filter(|(_, _, b)| b.contains("previous-attempt-failed"));
    assert_eq!(failed.count(), 9, "{answers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_ends_at_max_wait_with_409_and_past_max_waiters_at_once() {
    let _serial = GAUGE.lock().await;
    let up = upstream().await;
    let (gw, _dir) = waiting_gateway(&up, |c| {
        c.defaults.set("max_wait", "1s");
        c.max_waiters = 3;
    })
    .await;
    let k = key();
    let path = "/payments?delay_ms=4000";
    let first = tokio::spawn(post(&gw.base, path, Some(&k), "{\"amount\":1}").send());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let (base, k2) = (gw.base.clone(), k.clone());
    let waited = tokio::spawn(async move { duplicates(&base, path, &k2, 3).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A fourth duplicate finds three waiting: 409 at once.
    let refused = post(&gw.base, path, Some(&k), "{\"amount\":1}")
        .send()
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_millis(900));
    let refused = assert_problem(refused, 409, "request-in-flight").await;
    assert!(refused["detail"].is_string());
    for (status, _, body) in waited.await.unwrap() {
        assert_eq!(status, 409, "{body}");
    }
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(950), "{elapsed:?}");
    assert_eq!(first.await.unwrap().unwrap().status(), 201);
    assert_eq!(up.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_route_still_answers_409_at_once() {
    let _serial = GAUGE.lock().await;
    let up = upstream().await;
    let (gw, _dir) = waiting_gateway(&up, |c| c.defaults.set("on_in_flight", "conflict")).await;
    let answers = duplicates(&gw.base, "/payments?delay_ms=800", &key(), 10).await;
    assert_eq!(up.count(), 1);
    assert_eq!(
        answers.iter().filter(|(s, _, _)| *s == 409).count(),
        9,
        "{answers:?}"
    );
}

/// 100 duplicates, half to each of two gateways on one shared `store` (their own
/// lifecycles: events travel only through the store), whose waits are shorter than the
/// store's slow poll (2 s): only the first's event can answer the other gateway's waiters.
pub(crate) async fn split_across_two_gateways(store: &str, edit: impl Fn(&mut Config)) {
    let up = upstream().await;
    let config = |c: &mut Config| {
        c.defaults.set("on_in_flight", "wait");
        c.defaults.set("max_wait", "1800ms");
        edit(c);
    };
    let a = gateway(&up.base, store, &config).await;
    let b = gateway(&up.base, store, &config).await;
    let k = key();
    let path = "/payments?delay_ms=1000";
    let first = tokio::spawn(post(&a.base, path, Some(&k), "{\"amount\":1}").send());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (base_a, base_b, k2) = (a.base.clone(), b.base.clone(), k.clone());
    let on_a = tokio::spawn(async move { duplicates(&base_a, path, &k2, 49).await });
    let on_b = duplicates(&base_b, path, &k, 50).await;
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.status(), 201);
    assert!(!first.headers().contains_key("idempotent-replayed"));
    for (status, replayed, body) in on_a.await.unwrap().into_iter().chain(on_b) {
        assert_eq!((status, replayed), (201, true), "{body}");
    }
    assert_eq!(up.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_split_across_two_gateways_on_postgres_wait_for_one_run() {
    let _serial = GAUGE.lock().await;
    let Some(url) = test_url("IDEMGATE_TEST_DATABASE_URL") else {
        return;
    };
    let table = format!("idem_wait_{:012x}", rand_u64() >> 16);
    let (u, t) = (url.clone(), table.clone());
    let _drop = OnDrop(Some(Box::pin(async move { drop_pg_table(&u, &t).await })));
    split_across_two_gateways(&url, |c| c.store_table = table.clone()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_split_across_two_gateways_on_redis_wait_for_one_run() {
    let _serial = GAUGE.lock().await;
    let Some(url) = test_url("IDEMGATE_TEST_REDIS_URL") else {
        return;
    };
    let prefix = format!("idem-wait-{:016x}:", rand_u64());
    let (u, p) = (url.clone(), prefix.clone());
    let _delete = OnDrop(Some(Box::pin(
        async move { delete_redis_prefix(&u, &p).await },
    )));
    split_across_two_gateways(&url, |c| c.store_key_prefix = prefix.clone()).await;
}

/// Runs its cleanup when dropped, the test failed or not (on a thread and runtime of its
/// own: the test's runtime may be unwinding).
struct OnDrop(Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        let Some(cleanup) = self.0.take() else { return };
        std::thread::scope(|s| {
            s.spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(cleanup);
            });
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_duplicate_holds_no_per_principal_in_flight_slot() {
    let _serial = GAUGE.lock().await;
    let up = upstream().await;
    let (gw, _dir) = waiting_gateway(&up, |c| {
        c.defaults.set("max_in_flight_per_principal", 2);
    })
    .await;
    let k = key();
    let path = "/payments?delay_ms=4000";
    let first = tokio::spawn(post(&gw.base, path, Some(&k), "{\"amount\":1}").send());
    tokio::time::sleep(Duration::from_millis(300)).await;
    // One after another, so each gives its slot back before the next is admitted.
    let mut waiting = Vec::new();
    for n in 1..=3 {
        waiting.push(tokio::spawn(
            post(&gw.base, path, Some(&k), "{\"amount\":1}").send(),
        ));
        until_waiting(&gw, n).await;
    }
    // The first holds one slot, its three waiting duplicates none: another key runs.
    let other = post(&gw.base, "/payments", Some(&key()), "{\"amount\":2}")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 201, "{}", other.text().await.unwrap());
    assert_eq!(first.await.unwrap().unwrap().status(), 201);
    for resp in waiting {
        let resp = resp.await.unwrap().unwrap();
        let replayed = resp.headers().contains_key("idempotent-replayed");
        assert_eq!((resp.status().as_u16(), replayed), (201, true));
    }
    assert_eq!(up.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_released_at_once_is_not_run_again_by_late_waiters() {
    let _serial = GAUGE.lock().await;
    let up = upstream().await;
    let (gw, _dir) = waiting_gateway(&up, |c| c.defaults.set("max_wait", "30s")).await;
    // The first runs 12 s (all duplicates wait by then) and is released at once for the
    // waiters; the rerun is released at once, for an hour.
    let k = key();
    let path = "/payments?delay_ms_seq=12000,0&status=503&retry_after_seq=0,3600";
    let first = tokio::spawn(post(&gw.base, path, Some(&k), "{\"amount\":1}").send());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (base, k2) = (gw.base.clone(), k.clone());
    let answers = tokio::spawn(async move { duplicates(&base, path, &k2, 100).await });
    until_waiting(&gw, 100).await;
    assert!(first.is_finished().not(), "the first still runs");
    let answers = answers.await.unwrap();
    assert_eq!(first.await.unwrap().unwrap().status(), 503);
    assert_eq!(up.count(), 2, "the first and one rerun");
    let released = answers
        .iter()
        .filter(|(_, _, b)| b.contains("previous-attempt-released"));
    assert_eq!(released.count(), 99, "{answers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_do_not_run_a_key_released_by_another_attempt_after_their_record_vanished() {
    let _serial = GAUGE.lock().await;
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("idemgate.db");
    let gw = gateway(&up.base, &format!("sqlite://{}", db.display()), |c| {
        c.defaults.set("on_in_flight", "wait");
    })
    .await;
    let (k, path) = (
        key(),
        "/payments?delay_ms_seq=1500,0,0&status_seq=201,503,201",
    );
    let first = tokio::spawn(post(&gw.base, path, Some(&k), "{\"amount\":1}").send());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (base, k2) = (gw.base.clone(), k.clone());
    let waiting = tokio::spawn(async move { duplicates(&base, path, &k2, 10).await });
    until_waiting(&gw, 10).await;
    // The record is deleted behind the gateway's back while the first still runs; a new
    // attempt then runs and is released.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let deleted = conn.execute("DELETE FROM idempotency_records", []).unwrap();
    assert_eq!(deleted, 1);
    let retry = post(&gw.base, path, Some(&k), "{\"amount\":1}")
        .send()
        .await
        .unwrap();
    assert_eq!(retry.status(), 503);
    for (status, _, body) in waiting.await.unwrap() {
        assert_eq!(status, 409, "{body}");
    }
    let _ = first.await.unwrap().unwrap();
    assert_eq!(
        up.count(),
        2,
        "the first and the new attempt; no waiter ran it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_on_another_gateway_waits_for_the_rerun_it_did_not_win() {
    let _serial = GAUGE.lock().await;
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let table = format!("idem_wait_{:012x}", rand_u64() >> 16);
    let Some(url) = test_url("IDEMGATE_TEST_DATABASE_URL") else {
        return;
    };
    let (u, t) = (url.clone(), table.clone());
    let _drop = OnDrop(Some(Box::pin(async move { drop_pg_table(&u, &t).await })));
    let config = |c: &mut Config| {
        c.store_table = table.clone();
        c.defaults.set("on_in_flight", "wait");
    };
    let a = gateway(&up.base, &url, config).await;
    let b = gateway(&up.base, &url, config).await;
    drop(dir);
    let (k, path) = (key(), "/payments?delay_ms_seq=1000,2500&status_seq=503,201");
    let first = tokio::spawn(post(&a.base, path, Some(&k), "{\"amount\":1}").send());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answers = duplicates(&b.base, path, &k, 10).await;
    assert_eq!(first.await.unwrap().unwrap().status(), 503);
    let statuses: Vec<_> = answers.iter().map(|(s, r, _)| (*s, *r)).collect();
    assert_eq!(
        statuses.iter().filter(|a| **a == (201, false)).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|a| **a == (201, true)).count(),
        9,
        "{statuses:?}"
    );
    assert_eq!(up.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_the_waits_at_once() {
    let _serial = GAUGE.lock().await;
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("idemgate.db").display());
    let config = |c: &mut Config| {
        c.defaults.set("on_in_flight", "wait");
        c.defaults.set("max_wait", "30s");
    };
    // The first runs on gateway a; its duplicates wait on gateway b, which then stops.
    let a = gateway(&up.base, &store, config).await;
    let b = gateway(&up.base, &store, config).await;
    let (k, path) = (key(), "/payments?delay_ms=20000");
    let first = tokio::spawn(post(&a.base, path, Some(&k), "{\"amount\":1}").send());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (base, k2) = (b.base.clone(), k.clone());
    let waiting = tokio::spawn(async move { duplicates(&base, path, &k2, 5).await });
    until_waiting(&b, 5).await;
    // Well within max_wait (`stop` allows 10 s).
    b.stop().await;
    for (status, _, body) in waiting.await.unwrap() {
        assert_eq!(status, 409, "{body}");
    }
    first.abort();
    assert_eq!(up.count(), 1);
}
