//! SQLite files changed behind a running gateway (the real `idemgate` binary, so a fault
//! that kills the process shows as its exit signal): the database file, its `-wal` or its
//! `-shm` deleted, the database replaced, the `-shm` truncated. Covered requests get `503`
//! and nothing is forwarded, replays too; `/readyz` is not ready; the log names the file;
//! the process never dies of a signal (a truncated `-shm` used to kill it with `SIGBUS`)
//! and still stops cleanly on `SIGTERM`.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::*;

/// A gateway process on SQLite with its admin port, its stderr kept in a file.
struct Victim {
    child: Child,
    base: String,
    admin: String,
    log: PathBuf,
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address the gateway logged after `marker` (`listen=` or `admin=`), once it has.
fn logged_addr(log: &str, marker: &str) -> Option<String> {
    let at = log.find(marker)? + marker.len();
    let addr: String = log[at..]
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != '"')
        .collect();
    (!addr.is_empty()).then_some(addr)
}

impl Victim {
    /// Starts the gateway on ports the system picks (no race with other tests for a
    /// "free" port), read back from its log.
    async fn start(upstream: &str, db: &Path) -> Self {
        let any = "127.0.0.1:0";
        let log = db.with_extension("stderr");
        let mut child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["serve", "--listen", any, "--admin-listen", any])
            .args(["--upstream", upstream])
            .arg("--store")
            .arg(format!("sqlite://{}", db.display()))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut addrs = None;
        for _ in 0..400 {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let (Some(l), Some(a)) =
                (logged_addr(&text, "listen="), logged_addr(&text, "admin="))
            {
                addrs = Some((l, a));
                break;
            }
            if child.try_wait().unwrap().is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let Some((listen, admin)) = addrs else {
            let _ = child.kill();
            panic!(
                "the gateway did not log its addresses: {:?}",
                std::fs::read_to_string(&log)
            );
        };
        let victim = Self {
            child,
            base: format!("http://{listen}"),
            admin: format!("http://{admin}"),
            log,
        };
        for _ in 0..200 {
            if victim.ready().await == Some(200) {
                return victim;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the gateway did not start: {}", victim.stderr());
    }

    /// `/readyz`'s status, `None` if it does not answer.
    async fn ready(&self) -> Option<u16> {
        let resp = client().get(format!("{}/readyz", self.admin)).send().await;
        resp.ok().map(|r| r.status().as_u16())
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn assert_alive(&mut self) {
        let status = self.child.try_wait().unwrap();
        assert!(status.is_none(), "died: {status:?}\n{}", self.stderr());
    }

    /// Sends SIGTERM and asserts a clean exit (no signal, status 0).
    async fn stop_cleanly(mut self) {
        self.assert_alive();
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        let mut status = None;
        for _ in 0..400 {
            status = self.child.try_wait().unwrap();
            if status.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let status = status.expect("exits within 20 s of SIGTERM");
        assert_eq!(status.signal(), None, "{}", self.stderr());
        assert!(status.success(), "{status:?}: {}", self.stderr());
    }
}

/// What is done to the files behind the gateway's back; the file the log must name.
#[derive(Clone, Copy, Debug)]
enum Fault {
    DeleteDatabase,
    DeleteWal,
    DeleteShm,
    ReplaceDatabase,
    TruncateShm,
}

impl Fault {
    fn apply(self, db: &Path) -> PathBuf {
        let side = |s: &str| PathBuf::from(format!("{}{s}", db.display()));
        match self {
            Self::DeleteDatabase => std::fs::remove_file(db).map(|()| db.to_owned()),
            Self::DeleteWal => std::fs::remove_file(side("-wal")).map(|()| side("-wal")),
            Self::DeleteShm => std::fs::remove_file(side("-shm")).map(|()| side("-shm")),
            Self::ReplaceDatabase => {
                let other = db.with_extension("other");
                std::fs::copy(db, &other).unwrap();
                std::fs::rename(&other, db).map(|()| db.to_owned())
            }
            // In place, as `truncate -s 0` or `: >` does: the mapped pages are gone.
            Self::TruncateShm => std::fs::OpenOptions::new()
                .write(true)
                .open(side("-shm"))
                .and_then(|f| f.set_len(0))
                .map(|()| side("-shm")),
        }
        .unwrap()
    }
}

async fn status_of(base: &str, k: &str) -> reqwest::Response {
    post(base, "/payments", Some(k), "{}").send().await.unwrap()
}

async fn a_changed_file_is_503_never_a_crash(fault: Fault) {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("idemgate.db");
    let mut gw = Victim::start(&up.base, &db).await;
    let done = key();
    assert_eq!(status_of(&gw.base, &done).await.status(), 201);
    assert_eq!(up.count(), 1);

    let changed = fault.apply(&db);
    // Give the background checkpoint (every 200 ms) time to meet the fault too.
    tokio::time::sleep(Duration::from_millis(500)).await;
    gw.assert_alive();
    for k in [key(), done.clone()] {
        let resp = status_of(&gw.base, &k).await;
        assert!(resp.headers().get("retry-after").is_some());
        assert_problem(resp, 503, "store-unavailable").await;
    }
    assert_eq!(up.count(), 1, "{fault:?}: nothing forwarded, no replay");
    assert_eq!(gw.ready().await, Some(503), "{fault:?}: not ready");
    let ready = client()
        .get(format!("{}/readyz", gw.admin))
        .send()
        .await
        .unwrap();
    let why = ready.text().await.unwrap();
    let path = changed.display().to_string();
    assert_eq!(
        why.matches(&path).count(),
        1,
        "named once, not doubled: {why}"
    );
    let log = gw.stderr();
    assert!(
        log.contains("ERROR") && log.contains(&changed.display().to_string()),
        "{fault:?}: the log names {changed:?}:\n{log}"
    );
    gw.stop_cleanly().await;
    assert_eq!(up.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_database_file() {
    a_changed_file_is_503_never_a_crash(Fault::DeleteDatabase).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_wal_file() {
    a_changed_file_is_503_never_a_crash(Fault::DeleteWal).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_shm_file() {
    a_changed_file_is_503_never_a_crash(Fault::DeleteShm).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaced_database_file() {
    a_changed_file_is_503_never_a_crash(Fault::ReplaceDatabase).await;
}

/// A `-shm` truncated in place. The store checks its size before every batch and skips
/// checkpoints once it shrank, so the gateway usually answers `503`; but SQLite maps the
/// file, and a thread already inside SQLite when the pages vanish gets SIGBUS (a window the
/// store cannot close without a signal handler). Either way nothing recorded is lost: after
/// such a death, a restart on the same files replays the completed key and runs nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_shm_file_is_503_or_a_restart_loses_nothing() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("idemgate.db");
    let mut gw = Victim::start(&up.base, &db).await;
    let done = key();
    assert_eq!(status_of(&gw.base, &done).await.status(), 201);
    Fault::TruncateShm.apply(&db);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let died = gw.child.try_wait().unwrap();
    let Some(status) = died else {
        let resp = status_of(&gw.base, &done).await;
        assert_problem(resp, 503, "store-unavailable").await;
        assert_eq!(gw.ready().await, Some(503));
        gw.stop_cleanly().await;
        assert_eq!(up.count(), 1);
        return;
    };
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(7),
        "only SIGBUS: {status:?}\n{}",
        gw.stderr()
    );
    let again = Victim::start(&up.base, &db).await;
    let replay = status_of(&again.base, &done).await;
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(status_of(&again.base, &key()).await.status(), 201);
    assert_eq!(up.count(), 2, "the completed key did not run again");
    again.stop_cleanly().await;
}

/// The database moved away and back (the operator restores the same file): refused while
/// it is away, served again once it is back, with its records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_file_moved_back_is_served_again() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("idemgate.db");
    let gw = Victim::start(&up.base, &db).await;
    let done = key();
    assert_eq!(status_of(&gw.base, &done).await.status(), 201);
    let away = dir.path().join("away.db");
    std::fs::rename(&db, &away).unwrap();
    assert_problem(status_of(&gw.base, &key()).await, 503, "store-unavailable").await;
    assert_eq!(gw.ready().await, Some(503));
    std::fs::rename(&away, &db).unwrap();
    assert_eq!(gw.ready().await, Some(200));
    let replay = status_of(&gw.base, &done).await;
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(status_of(&gw.base, &key()).await.status(), 201);
    assert_eq!(up.count(), 2, "only the fresh key ran");
    gw.stop_cleanly().await;
}
