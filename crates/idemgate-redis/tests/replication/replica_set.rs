//! [`ReplicaSet`]: `scripts/cluster/redis.sh` run from a test, stopped when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

use idemgate_redis::{RedisOptions, RedisStore};

use crate::common;

/// A primary, one replica and three Sentinels (master name in `master`), all under a
/// directory of their own; dropping it kills them all and deletes the directory.
#[derive(Debug)]
pub(crate) struct ReplicaSet {
    dir: PathBuf,
    pub(crate) primary_port: u16,
    pub(crate) replica_port: u16,
    pub(crate) sentinel_ports: Vec<u16>,
    pub(crate) master: String,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/cluster/redis.sh")
}

fn run(args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(script())
        .args(args)
        .output()
        .expect("run scripts/cluster/redis.sh");
    assert!(
        out.status.success(),
        "redis.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

impl ReplicaSet {
    /// Starts the set; `None` (after saying why) when the tests are not gated in or
    /// `redis-server` is missing.
    pub(crate) fn start() -> Option<Self> {
        common::url()?;
        let installed = Command::new("redis-server").arg("--version").output();
        if !installed.is_ok_and(|o| o.status.success()) {
            println!("skipping: redis-server is not installed");
            return None;
        }
        let dir = std::env::temp_dir().join(format!(
            "idemgate-replication-{}-{:016x}",
            std::process::id(),
            rand::random::<u64>()
        ));
        let mut set = Self {
            dir: dir.clone(),
            primary_port: 0,
            replica_port: 0,
            sentinel_ports: Vec::new(),
            master: String::new(),
        };
        // from here on, a failure still stops whatever started
        let out = run(&["start", dir.to_str().unwrap()]);
        for line in out.lines() {
            match line.split_once('=') {
                Some(("PRIMARY_PORT", p)) => set.primary_port = p.parse().unwrap(),
                Some(("REPLICA_PORT", p)) => set.replica_port = p.parse().unwrap(),
                Some(("SENTINEL_PORTS", ps)) => {
                    set.sentinel_ports = ps.split(',').map(|p| p.parse().unwrap()).collect();
                }
                Some(("MASTER", m)) => set.master = m.to_owned(),
                _ => {}
            }
        }
        assert!(
            set.primary_port > 0 && set.sentinel_ports.len() == 3,
            "{out}"
        );
        Some(set)
    }

    fn act(&self, what: &str) {
        run(&[what, self.dir.to_str().unwrap()]);
    }

    /// Stops the replica (SIGSTOP): it acknowledges nothing until [`ReplicaSet::resume`].
    pub(crate) fn stall(&self) {
        self.act("stall");
    }

    /// Lets the replica run again.
    pub(crate) fn resume(&self) {
        self.act("resume");
    }

    /// Kills the primary with SIGKILL.
    pub(crate) fn kill_primary(&self) {
        self.act("kill-primary");
    }

    /// `redis://` to the primary.
    pub(crate) fn primary_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.primary_port)
    }

    /// `redis+sentinel://` to the three Sentinels.
    pub(crate) fn sentinel_url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinel_ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+sentinel://{}/{}", hosts.join(","), self.master)
    }

    /// A store on `url` with `opts` and a key prefix of its own.
    pub(crate) async fn store(url: &str, opts: &RedisOptions) -> RedisStore {
        RedisStore::connect_with(url, opts)
            .await
            .expect("connect to the replicated set")
            .with_key_prefix(&common::prefix())
            .unwrap()
    }
}

impl Drop for ReplicaSet {
    fn drop(&mut self) {
        // not `act`: a failed stop must not panic while unwinding
        let stopped = Command::new("bash")
            .arg(script())
            .arg("stop")
            .arg(&self.dir)
            .status();
        if !stopped.is_ok_and(|s| s.success()) {
            eprintln!("replica set: could not stop {}", self.dir.display());
        }
    }
}
