//! The store gauges on `/metrics` of a running gateway process, on every store, after
//! scripted traffic: completed, failed, expired and stuck records, then a purge.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::purge::Target;
use crate::support::*;

/// A gateway process with its admin listener, killed (SIGKILL) on drop.
struct Admin {
    child: Child,
    base: String,
    admin: String,
}

impl Drop for Admin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Starts `idemgate serve` on `target` with a 500 ms lease, a 1 s record TTL on
/// `POST /short`, the gauges every 100 ms and a purge every `purge`.
async fn start(target: &Target, upstream: &str, dir: &std::path::Path, purge: &str) -> Admin {
    let config = dir.join(format!("gw-{}.toml", rand_u64()));
    let body = format!(
        "{}purge_interval = \"{purge}\"\ngauges_interval = \"100ms\"\n\
         [defaults]\nlease_ttl = \"500ms\"\n\
         [[routes]]\nroute = \"POST /short\"\nrecord_ttl = \"1s\"\n",
        target.toml()
    );
    std::fs::write(&config, body).unwrap();
    let (port, admin) = (free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["serve", "--upstream", upstream, "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--admin-listen")
        .arg(format!("127.0.0.1:{admin}"))
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let gw = Admin {
        child,
        base: format!("http://127.0.0.1:{port}"),
        admin: format!("http://127.0.0.1:{admin}"),
    };
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return gw;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the gateway did not start");
}

/// The value of the first sample of `name` whose labels contain every one of `labels`.
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .find(|l| labels.iter().all(|want| l.contains(want)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Scrapes `/metrics` until `ok` holds for it (20 s at most); returns the last scrape.
async fn until(gw: &Admin, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let mut text = String::new();
    for _ in 0..100 {
        text = client()
            .get(format!("{}/metrics", gw.admin))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if ok(&text) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{what} never held; last scrape:\n{text}");
}

fn records(text: &str, state: &str) -> Option<f64> {
    sample(
        text,
        "idempotency_records",
        &[&format!("state=\"{state}\"")],
    )
}

/// Traffic through a first gateway: 3 completed records that live, 2 that expire after
/// 1 s, 1 failed, and 1 in progress when the gateway is killed (SIGKILL): its holder is
/// gone, so once its lease lapses it is stuck. A second gateway (no purge) must show all of
/// it; a third (purging) must purge the expired records and count its runs.
async fn gauges_follow_traffic(target: Target, self_expiring: bool) {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let first = start(&target, &up.base, dir.path(), "0s").await;
    for path in ["/payments", "/payments", "/payments", "/short", "/short"] {
        let resp = post(&first.base, path, Some(&key()), "{}")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
    }
    let resp = post(&first.base, "/payments?broken=1", Some(&key()), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 502);
    let slow =
        tokio::spawn(post(&first.base, "/payments?delay_ms=60000", Some(&key()), "{}").send());
    while up.count() < 7 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(first); // killed with the request in flight
    let _ = slow.await;
    tokio::time::sleep(Duration::from_millis(1200)).await; // lease and short TTL lapse

    let second = start(&target, &up.base, dir.path(), "0s").await;
    // Redis drops the expired records itself; the SQL stores hold them until a purge.
    let completed = if self_expiring { 3.0 } else { 5.0 };
    let expired = if self_expiring { 0.0 } else { 2.0 };
    let text = until(&second, "the gauges after the traffic", |t| {
        records(t, "completed") == Some(completed)
            && records(t, "failed") == Some(1.0)
            && records(t, "in_progress") == Some(1.0)
            && sample(t, "idempotency_stuck_in_progress_records", &[]) == Some(1.0)
            && sample(t, "idempotency_expired_records", &[]) == Some(expired)
    })
    .await;
    let age = sample(&text, "idempotency_oldest_record_age_seconds", &[]).unwrap();
    assert!(age >= 1.0, "the oldest record is over a second old: {age}");
    match target {
        Target::Postgres { .. } => {
            assert!(sample(&text, "idempotency_store_table_bytes", &[]).unwrap() > 0.0);
            assert!(sample(&text, "idempotency_store_dead_rows", &[]).is_some());
        }
        _ => assert!(sample(&text, "idempotency_record_body_bytes", &[]).unwrap() > 0.0),
    }
    // Exported at 0 from start-up; this gateway purges nothing.
    assert_eq!(
        sample(&text, "idempotency_purge_runs_total", &[]),
        Some(0.0)
    );
    drop(second);

    let third = start(&target, &up.base, dir.path(), "200ms").await;
    let text = until(&third, "a purge run and its effect", |t| {
        sample(t, "idempotency_purge_runs_total", &["result=\"ok\""]).is_some_and(|n| n >= 1.0)
            && sample(t, "idempotency_expired_records", &[]) == Some(0.0)
            && records(t, "completed") == Some(3.0)
    })
    .await;
    let purged = sample(&text, "idempotency_purged_records_total", &[]).unwrap_or(0.0);
    assert_eq!(purged, expired, "exactly the expired records were purged");
    assert!(
        sample(
            &text,
            "idempotency_purge_last_success_timestamp_seconds",
            &[]
        )
        .unwrap()
            > 0.0
    );
    assert!(sample(&text, "idempotency_purge_last_duration_seconds", &[]).is_some());
    if let Target::Postgres { .. } = target {
        // The statistics collector reports the purge's dead rows within seconds.
        until(&third, "dead rows after the purge", |t| {
            sample(t, "idempotency_store_dead_rows", &[]).is_some_and(|n| n >= 2.0)
        })
        .await;
    }
    drop(third);
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_gauges_follow_traffic() {
    gauges_follow_traffic(Target::sqlite(), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_gauges_follow_traffic() {
    let Some(t) = Target::postgres() else { return };
    gauges_follow_traffic(t, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_gauges_follow_traffic() {
    let Some(t) = Target::redis() else { return };
    gauges_follow_traffic(t, true).await;
}

/// Every metric an alert rule in deploy/prometheus/idemgate.rules.yml or a panel of
/// deploy/grafana/idemgate.json uses is one the code sets (a histogram by its base name).
#[test]
fn every_alert_uses_a_metric_the_code_sets() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut alerts =
        std::fs::read_to_string(format!("{root}/deploy/prometheus/idemgate.rules.yml")).unwrap();
    alerts += &std::fs::read_to_string(format!("{root}/deploy/grafana/idemgate.json")).unwrap();
    let mut sources = String::new();
    let mut dirs: Vec<std::path::PathBuf> = std::fs::read_dir(format!("{root}/crates"))
        .unwrap()
        .map(|e| e.unwrap().path().join("src"))
        .collect();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                sources += &std::fs::read_to_string(&path).unwrap();
            }
        }
    }
    let mut names: Vec<&str> = alerts
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("idempotency_"))
        .collect();
    names.sort();
    names.dedup();
    assert!(names.len() >= 8, "{names:?}");
    for name in names {
        let base = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        assert!(
            sources.contains(&format!("\"{name}\"")) || sources.contains(&format!("\"{base}\"")),
            "deploy/ uses `{name}`, which no crate sets"
        );
    }
}
