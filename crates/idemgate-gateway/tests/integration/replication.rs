//! The gateway on a PostgreSQL primary with a streaming standby (`scripts/cluster/postgres.sh`):
//! `require_synchronous_replication` refuses an asynchronous cluster at start-up, refuses new
//! keys (and says so on `/readyz`) while the synchronous standby takes nothing, and a failover
//! to a synchronous standby runs no key twice.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use crate::support::*;

/// A primary and its standby under `/tmp/idemgate-pg-*` (reachable by user `postgres`),
/// stopped and deleted on drop.
pub(crate) struct Cluster {
    pub(crate) dir: PathBuf,
    pub(crate) primary: u16,
    pub(crate) standby: u16,
}

impl Cluster {
    /// Starts one in `mode` (`async` or `sync`); `None`, after saying why, when this machine
    /// runs no PostgreSQL tests or has no server binaries.
    pub(crate) fn start(mode: &str) -> Option<Self> {
        test_url("IDEMGATE_TEST_DATABASE_URL")?;
        // One cluster built at a time: initdb and pg_basebackup load the machine, and the
        // tests running beside them have deadlines.
        static BUILDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let building = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
        let dir = PathBuf::from(format!("/tmp/idemgate-pg-{:016x}", rand_u64()));
        let out = script().arg("start").arg(&dir).arg(mode).output().unwrap();
        drop(building);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let port = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{key}=")))
                .and_then(|p| p.parse().ok())
        };
        let cluster = Cluster {
            dir,
            primary: port("PRIMARY_PORT").unwrap_or(0),
            standby: port("STANDBY_PORT").unwrap_or(0),
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        if stderr.contains("no initdb") {
            println!("skipping: {stderr}");
            return None;
        }
        assert!(
            out.status.success() && cluster.standby != 0,
            "{text}{stderr}"
        );
        Some(cluster)
    }

    /// Runs `postgres.sh COMMAND DIR`, asserting success.
    pub(crate) fn run(&self, command: &str) {
        let out = script().arg(command).arg(&self.dir).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "postgres.sh {command}: {stderr}");
    }

    /// The store URL of the server on `port`.
    pub(crate) fn url(port: u16) -> String {
        format!("postgres://postgres@127.0.0.1:{port}/postgres")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = script()
            .arg("stop")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .status();
    }
}

fn script() -> Command {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/cluster/postgres.sh"
    );
    let mut command = Command::new(path);
    command.stdin(Stdio::null());
    command
}

/// A fresh table name (`idem_ha_` and 12 hex digits).
pub(crate) fn table() -> String {
    format!("idem_ha_{:012x}", rand_u64() >> 16)
}

/// Waits up to `within` for `/readyz` of `admin` to answer `status`; returns its body.
async fn readyz_becomes(admin: &str, status: u16, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let resp = client()
            .get(format!("{admin}/readyz"))
            .send()
            .await
            .unwrap();
        let (got, body) = (resp.status().as_u16(), resp.text().await.unwrap());
        if got == status || Instant::now() > deadline {
            assert_eq!(got, status, "{body}");
            return body;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn an_asynchronous_cluster_is_refused_at_start_up() {
    let Some(cluster) = Cluster::start("async") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sync.toml");
    let store = Cluster::url(cluster.primary);
    let text = format!("store = \"{store}\"\nrequire_synchronous_replication = true\n");
    std::fs::write(&file, text).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["serve", "--listen", "127.0.0.1:0", "--admin-listen", ""])
        .args(["--upstream", "http://127.0.0.1:1", "--config"])
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Up to 30 s for the process to give up.
    for _ in 0..300 {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "serve must exit: {stderr}");
    assert!(stderr.contains("synchronous_standby_names"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_standby_refuses_new_keys_and_serves_replays() {
    let Some(cluster) = Cluster::start("sync") else {
        return;
    };
    let up = upstream().await;
    let t = table();
    let gw = gateway(&up.base, &Cluster::url(cluster.primary), |c| {
        c.store_table = t.clone();
        c.require_synchronous_replication = true;
        c.gauges_interval = "1s".into();
    })
    .await;
    let done = key();
    let first = post(&gw.base, "/payments", Some(&done), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 201);
    let first_body = first.text().await.unwrap();
    readyz_becomes(&gw.admin, 200, Duration::from_secs(10)).await;

    cluster.run("stall");
    let fresh = key();
    let resp = post(&gw.base, "/payments", Some(&fresh), "{}")
        .send()
        .await
        .unwrap();
    assert_problem(resp, 503, "store-unavailable").await;
    assert_eq!(
        up.count(),
        1,
        "a new key is not forwarded while the standby is stalled"
    );
    let why = readyz_becomes(&gw.admin, 503, Duration::from_secs(15)).await;
    assert!(why.contains("new keys are refused"), "{why}");
    let resp = post(&gw.base, "/payments", Some(&fresh), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503, "still refused");
    let replay = post(&gw.base, "/payments", Some(&done), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.text().await.unwrap(), first_body);
    assert_eq!(up.count(), 1);

    cluster.run("resume");
    readyz_becomes(&gw.admin, 200, Duration::from_secs(20)).await;
    let mut status = 0;
    for _ in 0..80 {
        let resp = post(&gw.base, "/payments", Some(&fresh), "{}")
            .send()
            .await
            .unwrap();
        status = resp.status().as_u16();
        if status == 201 {
            break;
        }
        assert!([503, 409].contains(&status), "unexpected {status}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(
        status, 201,
        "the retry runs once the standby confirms again"
    );
    assert_eq!(up.count(), 2, "the refused key ran once");
    let again = post(&gw.base, "/payments", Some(&fresh), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(up.count(), 2);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_the_synchronous_standby_runs_no_key_twice() {
    let Some(cluster) = Cluster::start("sync") else {
        return;
    };
    // The relay plays the virtual IP the clients of the database use.
    let relay = Relay::start(&format!("127.0.0.1:{}", cluster.primary)).await;
    let up = upstream().await;
    let t = table();
    let gw = gateway(
        &up.base,
        &relay.url_for(&Cluster::url(cluster.primary)),
        |c| {
            c.store_table = t.clone();
        },
    )
    .await;
    let keys: Vec<String> = (0..20).map(|_| key()).collect();
    let mut bodies = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let body = format!("{{\"n\":{i}}}");
        let resp = post(&gw.base, "/payments", Some(k), &body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
        bodies.push(resp.text().await.unwrap());
    }
    assert_eq!(up.count(), keys.len());

    cluster.run("kill-primary");
    cluster.run("promote");
    relay.retarget(&format!("127.0.0.1:{}", cluster.standby));
    for (i, k) in keys.iter().enumerate() {
        let body = format!("{{\"n\":{i}}}");
        let mut resp = None;
        // Store calls get 503 until the pool has connected to the new primary.
        for _ in 0..80 {
            let r = post(&gw.base, "/payments", Some(k), &body)
                .send()
                .await
                .unwrap();
            if r.status() != 503 {
                resp = Some(r);
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let resp = resp.expect("the gateway reaches the promoted standby");
        assert_eq!(resp.status(), 201, "key {i}");
        assert_eq!(resp.headers()["idempotent-replayed"], "true", "key {i}");
        assert_eq!(resp.text().await.unwrap(), bodies[i], "key {i}");
    }
    assert_eq!(up.count(), keys.len(), "no key ran twice");
    gw.stop().await;
}
