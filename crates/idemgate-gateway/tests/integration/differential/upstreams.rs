//! The three upstreams (`tests/upstreams/`) as processes of their own, each in its own
//! process group that is killed on drop (gunicorn's worker with its master), on failure too.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::wire;
use crate::support::{output_within, python, text};

/// A running upstream.
pub(super) struct Upstream {
    /// `host:port`.
    pub(super) addr: String,
    group: Group,
}

impl Upstream {
    /// `http://host:port`, for the gateway's `--upstream`.
    pub(super) fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What the upstream printed so far, for failure messages.
    pub(super) fn log(&self) -> String {
        std::fs::read_to_string(self.group.dir.path().join("log")).unwrap_or_default()
    }
}

/// A process group, killed (every member) and reaped on drop, before its folder goes.
struct Group {
    child: Child,
    dir: tempfile::TempDir,
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The path in `var`, or `None` after saying why `test` skips.
fn from_env(test: &str, var: &str, script: &str) -> Option<PathBuf> {
    match std::env::var_os(var) {
        Some(v) if !v.is_empty() => Some(PathBuf::from(v)),
        _ => {
            eprintln!("{test}: skipped: {var} is unset ({script} prepares it and sets it)");
            None
        }
    }
}

fn program(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/upstreams")
        .join(name)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Flask under gunicorn (one worker), from `IDEMGATE_TEST_PYTHON`'s environment.
pub(super) async fn flask(test: &str) -> Option<Upstream> {
    let python = python(test)?;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut cmd = Command::new(python);
    // No control socket: it would be one file in $HOME shared by every gunicorn.
    cmd.args([
        "-m",
        "gunicorn",
        "--no-control-socket",
        "--workers",
        "1",
        "--bind",
    ])
    .arg(format!("127.0.0.1:{port}"))
    .arg("--chdir")
    .arg(program(""))
    .arg("flask_app:app")
    .env("PYTHONDONTWRITEBYTECODE", "1"); // no __pycache__ in the source tree
    Some(start(cmd, dir, port).await)
}

/// Express on Node.js, from `IDEMGATE_TEST_NODE` and `IDEMGATE_TEST_NODE_MODULES`.
pub(super) async fn express(test: &str) -> Option<Upstream> {
    let script = "scripts/test.d/node.sh";
    let node = from_env(test, "IDEMGATE_TEST_NODE", script)?;
    let modules = from_env(test, "IDEMGATE_TEST_NODE_MODULES", script)?;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut cmd = Command::new(node);
    cmd.arg(program("express_app.js"))
        .arg(port.to_string())
        .env("NODE_PATH", modules);
    Some(start(cmd, dir, port).await)
}

/// Go's `net/http` `ServeMux`, built with `IDEMGATE_TEST_GO`.
pub(super) async fn go_mux(test: &str) -> Option<Upstream> {
    let go = from_env(test, "IDEMGATE_TEST_GO", "scripts/test.d/go.sh")?;
    let dir = tempfile::tempdir().unwrap();
    let binary = dir.path().join("go_mux");
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let mut build = Command::new(go);
    build
        .args(["build", "-o"])
        .arg(&binary)
        .arg(".")
        .current_dir(program("go_mux"))
        .env("GOCACHE", tmp.join("go-cache"))
        .env("GOPATH", tmp.join("gopath"));
    let out = output_within(build, Duration::from_secs(300)).await;
    assert!(out.status.success(), "go build: {}", text(&out));
    let port = free_port();
    let mut cmd = Command::new(binary);
    cmd.arg(port.to_string());
    Some(start(cmd, dir, port).await)
}

/// Spawns `cmd` in a process group of its own, its output into `dir/log`, and waits until
/// it answers `GET /counts` (30 s at most).
async fn start(mut cmd: Command, dir: tempfile::TempDir, port: u16) -> Upstream {
    let log = std::fs::File::create(dir.path().join("log")).unwrap();
    let child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let mut up = Upstream {
        addr: format!("127.0.0.1:{port}"),
        group: Group { child, dir },
    };
    for _ in 0..300 {
        if tokio::net::TcpStream::connect(&up.addr).await.is_ok() {
            wire::counts(&up.addr).await;
            return up;
        }
        if let Ok(Some(exit)) = up.group.child.try_wait() {
            panic!("{cmd:?} exited ({exit}): {}", up.log());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{cmd:?} did not answer within 30 s: {}", up.log());
}
