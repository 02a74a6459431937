//! The gateway on a Redis primary, one replica and three Sentinels
//! (`scripts/cluster/redis.sh`), through `redis+sentinel://` with `redis_wait_replicas = 1`:
//! while the replica is stalled a new key gets `503` and is not forwarded, a completed key is
//! still replayed; after a Sentinel failover (a `kill -9` of the primary) every completed key
//! replays its first answer, none runs twice, and the gateway writes on the new primary
//! without a restart.
//!
//! The upstream is the counting one of `support`: each key's body is its own, each execution
//! answers with a number no other execution got, so "N keys answered, N executions" means
//! each key ran exactly once. Gated on `IDEMGATE_TEST_REDIS_URL` and on `redis-server`, like
//! the store's own replication tests; otherwise each case prints why and passes as skipped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use crate::support::*;

/// What the gateway waits for one replica's acknowledgement.
const WAIT: &str = "300ms";
/// How long a key may keep getting `503` across a failover (Sentinel's down-after is 1 s).
const FAILOVER_BOUND: Duration = Duration::from_secs(30);
/// Retries of a refused key while the replica is stalled.
const RETRIES: usize = 10;

/// The set of `scripts/cluster/redis.sh`, stopped (every process killed, its directory
/// deleted) on drop. The store tests' `ReplicaSet` depends on their `common` module, which
/// this test binary does not have: this wraps the same script.
struct Sentinels {
    dir: PathBuf,
    primary: u16,
    replica: u16,
    sentinels: Vec<u16>,
    master: String,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/cluster/redis.sh")
}

/// Runs `redis.sh COMMAND DIR`, asserting success; its standard output.
fn redis_sh(command: &str, dir: &Path) -> String {
    let out = Command::new("bash")
        .arg(script())
        .arg(command)
        .arg(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/cluster/redis.sh");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "redis.sh {command}: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

impl Sentinels {
    /// Starts the set; `None`, after saying why, when Redis tests are not gated in or
    /// `redis-server` is missing.
    fn start() -> Option<Self> {
        test_url("IDEMGATE_TEST_REDIS_URL")?;
        let installed = Command::new("redis-server").arg("--version").output();
        if !installed.is_ok_and(|o| o.status.success()) {
            println!("skipping: redis-server is not installed");
            return None;
        }
        let dir = std::env::temp_dir().join(format!("idemgate-gw-sentinel-{:016x}", rand_u64()));
        let mut set = Self {
            dir,
            primary: 0,
            replica: 0,
            sentinels: Vec::new(),
            master: String::new(),
        };
        // from here on, a failure still stops whatever started (the drop)
        let out = redis_sh("start", &set.dir);
        for line in out.lines() {
            match line.split_once('=') {
                Some(("PRIMARY_PORT", p)) => set.primary = p.parse().unwrap(),
                Some(("REPLICA_PORT", p)) => set.replica = p.parse().unwrap(),
                Some(("SENTINEL_PORTS", ps)) => {
                    set.sentinels = ps.split(',').map(|p| p.parse().unwrap()).collect();
                }
                Some(("MASTER", m)) => set.master = m.to_owned(),
                _ => {}
            }
        }
        assert!(set.replica > 0 && set.sentinels.len() == 3, "{out}");
        Some(set)
    }

    /// `stall`, `resume` or `kill-primary`.
    fn run(&self, command: &str) {
        redis_sh(command, &self.dir);
    }

    /// `redis+sentinel://` to the three Sentinels.
    fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+sentinel://{}/{}", hosts.join(","), self.master)
    }

    /// The primary's port as the first Sentinel tells it.
    fn primary_per_sentinel(&self) -> u16 {
        let out = Command::new("redis-cli")
            .args(["-p", &self.sentinels[0].to_string()])
            .args(["SENTINEL", "get-master-addr-by-name", &self.master])
            .output()
            .expect("redis-cli is installed");
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .nth(1)
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        // not `redis_sh`: a failed stop must not panic while unwinding
        let stopped = Command::new("bash")
            .arg(script())
            .arg("stop")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .status();
        if !stopped.is_ok_and(|s| s.success()) {
            eprintln!("redis_failover: could not stop {}", self.dir.display());
        }
    }
}

/// A `redis-server` replicating from the port given, killed on drop (with its directory).
struct NewReplica {
    child: Child,
    /// Its working directory, deleted on drop.
    _dir: tempfile::TempDir,
}

impl NewReplica {
    fn of(primary: u16) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(dir.path())
            .args(["--replicaof", "127.0.0.1", &primary.to_string()])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server is installed");
        Self { child, _dir: dir }
    }
}

impl Drop for NewReplica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One POST of `key` with its own body: status, `Idempotent-Replayed`, content type, body.
async fn send(base: &str, key: &str) -> (u16, bool, String, String) {
    let body = serde_json::json!({ "key": key }).to_string();
    let resp = post(base, "/payments", Some(key), &body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let header = |name: &str| {
        let value = resp.headers().get(name);
        value
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    let (replayed, content_type) = (
        header("idempotent-replayed") == "true",
        header("content-type"),
    );
    (status, replayed, content_type, resp.text().await.unwrap())
}

/// Sends `key` until an answer is not one of `refused` (for [`FAILOVER_BOUND`] at most,
/// 100 ms apart): status, `Idempotent-Replayed`, body.
async fn until_not(base: &str, key: &str, refused: &[u16]) -> (u16, bool, String) {
    let started = Instant::now();
    loop {
        let (status, replayed, _, body) = send(base, key).await;
        if !refused.contains(&status) {
            return (status, replayed, body);
        }
        assert!(
            started.elapsed() < FAILOVER_BOUND,
            "key {key} still gets {status} after {FAILOVER_BOUND:?}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Completes `n` fresh keys through the gateway; each key with its first body.
async fn completed(base: &str, n: usize) -> Vec<(String, String)> {
    let mut done = Vec::new();
    for _ in 0..n {
        let k = key();
        let (status, replayed, _, body) = send(base, &k).await;
        assert_eq!((status, replayed), (201, false), "{k}: {body}");
        assert!(body.contains(&k), "{k}: {body}");
        done.push((k, body));
    }
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_replica_refuses_new_keys_unforwarded_and_replays_the_rest() {
    let Some(set) = Sentinels::start() else {
        return;
    };
    let up = upstream().await;
    let gw = gateway(&up.base, &set.url(), |c| {
        c.redis_wait_replicas = 1;
        c.redis_wait_timeout = WAIT.into();
    })
    .await;
    let done = completed(&gw.base, 3).await;
    assert_eq!(up.count(), 3);

    set.run("stall");
    let fresh = key();
    let body = serde_json::json!({ "key": fresh }).to_string();
    let resp = post(&gw.base, "/payments", Some(&fresh), &body)
        .send()
        .await
        .unwrap();
    let problem = assert_problem(resp, 503, "store-unavailable").await;
    assert_eq!(up.count(), 3, "forwarded unconfirmed: {problem}");
    // retries stay refused: 503, or 409 while the refused attempt's record awaits its
    // release (which the stalled replica does not acknowledge either)
    let mut seen = Vec::new();
    for _ in 0..RETRIES {
        let (status, _, content_type, text) = send(&gw.base, &fresh).await;
        assert!([503, 409].contains(&status), "{status}: {text}");
        assert_eq!(content_type, "application/problem+json");
        seen.push(status);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("retries of the refused key while stalled: {seen:?}");
    assert_eq!(up.count(), 3, "a retry was forwarded unconfirmed");
    for (k, first) in &done {
        let (status, replayed, _, body) = send(&gw.base, k).await;
        assert_eq!((status, replayed), (201, true), "{k}: {body}");
        assert_eq!(&body, first, "{k}");
    }
    assert_eq!(up.count(), 3, "the stalled replica let a key through");

    set.run("resume");
    // 503 until the replica acknowledges again; 409 while a refused attempt's record waits
    // for its release
    let (status, replayed, body) = until_not(&gw.base, &fresh, &[503, 409]).await;
    assert_eq!((status, replayed), (201, false), "{body}");
    assert!(body.contains(&fresh), "{body}");
    assert_eq!(up.count(), 4, "the refused key ran once");
    let (status, replayed, _, again) = send(&gw.base, &fresh).await;
    assert_eq!((status, replayed, &again), (201, true, &body));
    assert_eq!(up.count(), 4);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_runs_no_key_twice_and_the_gateway_follows_it() {
    let Some(set) = Sentinels::start() else {
        return;
    };
    let up = upstream().await;
    let gw = gateway(&up.base, &set.url(), |c| {
        c.redis_wait_replicas = 1;
        c.redis_wait_timeout = WAIT.into();
    })
    .await;
    // acknowledged by the replica (WAIT 1) before each 201
    let done = completed(&gw.base, 20).await;
    assert_eq!(up.count(), done.len());

    set.run("kill-primary");
    let started = Instant::now();
    for (k, first) in &done {
        let (status, replayed, body) = until_not(&gw.base, k, &[503]).await;
        assert_eq!((status, replayed), (201, true), "{k}: {body}");
        assert_eq!(&body, first, "{k}: not the first answer");
    }
    println!("every key replayed {:?} after the kill", started.elapsed());
    assert_eq!(
        up.count(),
        done.len(),
        "a key ran twice across the failover"
    );
    assert_eq!(
        set.primary_per_sentinel(),
        set.replica,
        "Sentinel promoted the replica"
    );

    // the promoted replica has no replica of its own: a new key is refused, not forwarded
    let fresh = key();
    let (status, _, content_type, text) = send(&gw.base, &fresh).await;
    assert_eq!(
        (status, content_type.as_str()),
        (503, "application/problem+json"),
        "{text}"
    );
    assert_eq!(up.count(), done.len(), "forwarded unconfirmed: {text}");

    // once the new primary has a replica, the same gateway writes there
    let _new_replica = NewReplica::of(set.replica);
    let (status, replayed, body) = until_not(&gw.base, &fresh, &[503, 409]).await;
    assert_eq!((status, replayed), (201, false), "{body}");
    assert!(body.contains(&fresh), "{body}");
    assert_eq!(up.count(), done.len() + 1, "the fresh key ran once");
    let (status, replayed, _, again) = send(&gw.base, &fresh).await;
    assert_eq!((status, replayed, &again), (201, true, &body));
    gw.stop().await;
}
