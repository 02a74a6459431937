//! [`Cluster`]: a primary and a streaming standby from `scripts/cluster/postgres.sh`,
//! stopped and deleted on drop (on a panic too).

use std::path::{Path, PathBuf};
use std::process::Command;

/// How long one script command may run.
const SCRIPT_TIMEOUT_SECS: &str = "120";

/// A running cluster: its directory and the servers' ports.
pub(crate) struct Cluster {
    dir: PathBuf,
    pub(crate) primary: u16,
    pub(crate) standby: u16,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/cluster/postgres.sh")
}

/// Runs `postgres.sh args...` under `timeout`; its stdout, or a panic with its stderr.
fn run(args: &[&str]) -> String {
    let out = Command::new("timeout")
        .arg(SCRIPT_TIMEOUT_SECS)
        .arg("bash")
        .arg(script())
        .args(args)
        .output()
        .expect("run postgres.sh");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "postgres.sh {args:?}: {}: {stderr}",
        out.status
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether this machine has PostgreSQL's server binaries; prints why the case is skipped
/// if not.
fn installed() -> bool {
    let found = std::fs::read_dir("/usr/lib/postgresql")
        .map(|dirs| dirs.flatten().any(|d| d.path().join("bin/initdb").exists()))
        .unwrap_or(false);
    if !found {
        println!("skipping: no /usr/lib/postgresql/*/bin/initdb");
    }
    found
}

impl Cluster {
    /// Starts a primary and a standby (`mode`: `async` or `sync`) in a fresh directory;
    /// `None` when PostgreSQL is not installed.
    pub(crate) fn start(mode: &str) -> Option<Self> {
        if !installed() {
            return None;
        }
        let dir = std::env::temp_dir().join(format!("idemgate-pg-{:016x}", rand::random::<u64>()));
        // The guard exists before the servers do, so a failed start is cleaned up too.
        let mut cluster = Cluster {
            dir,
            primary: 0,
            standby: 0,
        };
        let out = run(&["start", cluster.dir(), mode]);
        for line in out.lines() {
            if let Some(port) = line.strip_prefix("PRIMARY_PORT=") {
                cluster.primary = port.parse().expect("primary port");
            } else if let Some(port) = line.strip_prefix("STANDBY_PORT=") {
                cluster.standby = port.parse().expect("standby port");
            }
        }
        assert!(
            cluster.primary > 0 && cluster.standby > 0,
            "ports in {out:?}"
        );
        Some(cluster)
    }

    fn dir(&self) -> &str {
        self.dir.to_str().expect("a UTF-8 temporary directory")
    }

    /// `kill -9` of the primary and its backends.
    pub(crate) async fn kill_primary(&self) {
        self.script("kill-primary").await;
    }

    /// Stops the standby's WAL receiver (SIGSTOP): the standby takes nothing more.
    pub(crate) async fn stall(&self) {
        self.script("stall").await;
    }

    /// Lets the stalled WAL receiver run again.
    pub(crate) async fn resume(&self) {
        self.script("resume").await;
    }

    /// Kills the stalled WAL receiver: what it had not written is lost, as an asynchronous
    /// failover loses it.
    pub(crate) async fn drop_receiver(&self) {
        self.script("drop-receiver").await;
    }

    /// Starts the killed primary again, read-write on its former timeline.
    pub(crate) async fn restart_old_primary(&self) {
        self.script("restart-old").await;
    }

    /// Promotes the standby; returns once it takes writes.
    pub(crate) async fn promote(&self) {
        self.script("promote").await;
    }

    async fn script(&self, command: &'static str) {
        let dir = self.dir().to_owned();
        tokio::task::spawn_blocking(move || run(&[command, &dir]))
            .await
            .expect("postgres.sh");
    }

    /// A URL for user `postgres`, database `postgres`, on `ports` of 127.0.0.1 in order.
    pub(crate) fn url(&self, ports: &[u16]) -> String {
        let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        format!("postgres://postgres@{}/postgres", hosts.join(","))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let stopped = Command::new("timeout")
            .arg(SCRIPT_TIMEOUT_SECS)
            .arg("bash")
            .arg(script())
            .args(["stop", self.dir()])
            .status();
        if !matches!(stopped, Ok(s) if s.success()) && !std::thread::panicking() {
            panic!("could not stop the cluster in {}: {stopped:?}", self.dir());
        }
    }
}
