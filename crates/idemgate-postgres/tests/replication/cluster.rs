//! A primary and a streaming standby for one test ([`Cluster`]), stopped and deleted when
//! it is dropped, and the stores and connections the tests use on it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use idemgate_postgres::{PostgresOptions, PostgresStore};
use sqlx::{Connection, PgConnection};
use tokio::time::Instant;

/// How long one run of the cluster script may take.
const SCRIPT_TIMEOUT: &str = "120";

/// The cluster script, from the repository root.
fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/cluster/postgres.sh")
}

/// Panics with a clear message when the PostgreSQL server binaries are missing.
fn require_binaries() {
    let found = std::fs::read_dir("/usr/lib/postgresql")
        .ok()
        .is_some_and(|dirs| {
            dirs.flatten()
                .any(|d| d.path().join("bin/initdb").is_file())
        });
    assert!(
        found,
        "these tests need PostgreSQL's server binaries (initdb, pg_ctl, pg_basebackup) under \
         /usr/lib/postgresql/*/bin: install the server package (e.g. postgresql-15)"
    );
}

/// Runs the cluster script with `args`, bounded by `timeout`; its standard output.
fn run(args: &[&str]) -> String {
    let out = Command::new("timeout")
        .arg(SCRIPT_TIMEOUT)
        .arg("bash")
        .arg(script())
        .args(args)
        .output()
        .expect("run scripts/cluster/postgres.sh");
    assert!(
        out.status.success(),
        "postgres.sh {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A primary and its standby under a directory of their own.
#[derive(Debug)]
pub(crate) struct Cluster {
    dir: String,
    /// The primary's port on 127.0.0.1.
    pub(crate) primary: u16,
}

/// Which `synchronous_standby_names` the primary starts with.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Mode {
    /// None: commits do not wait for the standby.
    Async,
    /// `FIRST 1 (standby)`.
    Sync,
}

impl Cluster {
    /// Builds and starts a cluster (a fresh directory under `/tmp`, reachable by user
    /// `postgres`).
    pub(crate) fn start(mode: Mode) -> Self {
        require_binaries();
        let mut cluster = Self {
            dir: format!("/tmp/idemgate-pg-{:016x}", rand::random::<u64>()),
            primary: 0,
        };
        let mode = match mode {
            Mode::Async => "async",
            Mode::Sync => "sync",
        };
        // `cluster` is dropped (and the directory cleaned up) if this panics.
        let out = run(&["start", &cluster.dir, mode]);
        cluster.primary = out
            .lines()
            .find_map(|l| l.strip_prefix("PRIMARY_PORT="))
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no PRIMARY_PORT in {out:?}"));
        cluster
    }

    /// Waits until the standby streams as `sync` (the script waits only for `streaming`, and
    /// a loaded machine may take a while).
    pub(crate) async fn synchronous(self) -> Self {
        let mut conn = self.admin().await;
        let began = Instant::now();
        loop {
            let sync: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_replication \
                 WHERE state = 'streaming' AND sync_state = 'sync'",
            )
            .fetch_one(&mut conn)
            .await
            .unwrap();
            if sync == 1 {
                return self;
            }
            assert!(
                began.elapsed() < Duration::from_secs(30),
                "the standby is not synchronous"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The primary's URL (user `postgres`, database `postgres`, trust).
    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.primary)
    }

    /// Stops the standby's WAL receiver: synchronous commits then wait.
    pub(crate) fn stall(&self) {
        run(&["stall", &self.dir]);
    }

    /// Lets the WAL receiver run again.
    pub(crate) fn resume(&self) {
        run(&["resume", &self.dir]);
    }

    /// A connection of its own to the primary, as an operator's.
    pub(crate) async fn admin(&self) -> PgConnection {
        PgConnection::connect(&self.url())
            .await
            .expect("connect to the primary")
    }

    /// Runs `sql` on a connection of its own.
    pub(crate) async fn exec(&self, sql: &str) {
        let mut conn = self.admin().await;
        sqlx::raw_sql(sql).execute(&mut conn).await.expect(sql);
    }

    /// A store on a fresh table of its own, migrated (before any stall), with `options`.
    pub(crate) async fn store(&self, options: &PostgresOptions) -> PostgresStore {
        let table = format!("idem_repl_{:08x}", rand::random::<u32>());
        let store = PostgresStore::connect_with(&self.url(), options)
            .await
            .expect("connect the store")
            .with_table_name(&table)
            .unwrap();
        store.migrate().await.expect("migrate");
        store
    }

    /// Waits until a backend of the primary waits on a synchronous standby (`SyncRep`) and
    /// returns its pid.
    pub(crate) async fn sync_waiter(&self) -> i32 {
        let mut conn = self.admin().await;
        let began = Instant::now();
        loop {
            let pid: Option<i32> = sqlx::query_scalar(
                "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep' LIMIT 1",
            )
            .fetch_optional(&mut conn)
            .await
            .unwrap();
            if let Some(pid) = pid {
                return pid;
            }
            assert!(
                began.elapsed() < Duration::from_secs(10),
                "no commit waits on the standby"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let stopped = Command::new("timeout")
            .arg(SCRIPT_TIMEOUT)
            .arg("bash")
            .arg(script())
            .args(["stop", &self.dir])
            .status();
        if !matches!(stopped, Ok(s) if s.success()) && !std::thread::panicking() {
            panic!("could not stop the cluster in {}: {stopped:?}", self.dir);
        }
    }
}

/// Options requiring synchronous replication, with a small pool and `deadline` as the
/// statement timeout (the store deadline).
pub(crate) fn sync_options(max_connections: u32, deadline: Duration) -> PostgresOptions {
    PostgresOptions::new()
        .with_require_synchronous_replication(true)
        .with_max_connections(max_connections)
        .with_statement_timeout(Some(deadline))
        .with_acquire_timeout(Duration::from_secs(2))
}
