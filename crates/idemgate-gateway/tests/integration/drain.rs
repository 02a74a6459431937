//! `SIGTERM` with hundreds of covered requests in flight: every one is answered, recorded and
//! replayed after a restart, never run twice (issue 27: what must keep holding while memory
//! and connections are bounded).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use crate::support::*;

/// Requests in flight when the gateway is told to stop.
const IN_FLIGHT: usize = 500;

/// The upstream holds each request this long: far longer than sending them all takes on an
/// idle machine, so (nearly) all are in flight at `SIGTERM`.
const PATH: &str = "/payments?delay_ms=15000";

fn sqlite_config(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let config = dir.path().join("idemgate.toml");
    let db = dir.path().join("idemgate.db");
    std::fs::write(&config, format!("store = \"sqlite://{}\"\n", db.display())).unwrap();
    config
}

/// Waits (bounded, so a broken gateway fails instead of hanging) until `done()`.
async fn until(what: &str, done: impl Fn() -> bool) {
    for _ in 0..600 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never happened: {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_500_requests_in_flight_and_their_retries_replay() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let config = sqlite_config(&dir);
    let mut gw = spawn_binary(&up.base, &config).await;
    let keys: Vec<String> = (0..IN_FLIGHT).map(|_| key()).collect();
    let answered = Arc::new(AtomicUsize::new(0));
    let requests: Vec<_> = keys
        .iter()
        .map(|k| {
            let (send, answered) = (post(&gw.base, PATH, Some(k), "{}").send(), answered.clone());
            tokio::spawn(async move {
                let status = send.await.map(|r| r.status().as_u16());
                answered.fetch_add(1, Ordering::SeqCst);
                status
            })
        })
        .collect();
    until("every request reached the upstream", || {
        up.count() == IN_FLIGHT
    })
    .await;
    // On a loaded machine the first may be answered before the last reached the upstream.
    let early = answered.load(Ordering::SeqCst);
    assert!(early < IN_FLIGHT / 2, "{early} answered before SIGTERM");
    let pid = gw.child.id().to_string();
    let signalled = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    assert!(signalled.unwrap().success());

    for request in requests {
        assert_eq!(
            request.await.unwrap().unwrap(),
            201,
            "answered while draining"
        );
    }
    let exited = tokio::task::spawn_blocking(move || (gw.child.wait().unwrap(), gw));
    let (code, gw) = tokio::time::timeout(Duration::from_secs(30), exited)
        .await
        .expect("the gateway exits once drained")
        .unwrap();
    assert!(code.success(), "clean exit: {code:?}");
    drop(gw);
    assert_eq!(up.count(), IN_FLIGHT);

    let gw = spawn_binary(&up.base, &config).await;
    let replays = futures_util::stream::iter(&keys)
        .map(|k| post(&gw.base, PATH, Some(k), "{}").send())
        .buffer_unordered(50)
        .collect::<Vec<_>>()
        .await;
    for replay in replays {
        let replay = replay.unwrap();
        assert_eq!(replay.status(), 201);
        assert_eq!(replay.headers()["idempotent-replayed"], "true");
    }
    assert_eq!(up.count(), IN_FLIGHT, "no request ran twice");
}
