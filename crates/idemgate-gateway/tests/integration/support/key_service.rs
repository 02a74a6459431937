//! A key service for tests: the real binary (`idemgate key-service`) or in process, with
//! three clients: `alpha` and `beta` (namespaces of those names) and `ops` (admin).

use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

/// The clients' tokens.
pub(crate) const TOKEN_A: &str = "token-alpha-0123456789";
pub(crate) const TOKEN_B: &str = "token-beta-0123456789";
pub(crate) const TOKEN_ADMIN: &str = "token-ops-0123456789";

fn hash(t: &str) -> String {
    hex::encode(Sha256::digest(t.as_bytes()))
}

/// The `[key_service]` section with the three clients, on `listen`.
pub(crate) fn config_text(store: &str, listen: &str, extra: &str) -> String {
    let mut out = format!(
        "store = \"{store}\"\n{extra}\n[key_service]\nlisten = \"{listen}\"\nadmin_listen = \"\"\n"
    );
    for (name, ns, token, admin) in [
        ("alpha", "alpha", TOKEN_A, false),
        ("beta", "beta", TOKEN_B, false),
        ("ops", "ops", TOKEN_ADMIN, true),
    ] {
        out += &format!(
            "[[key_service.clients]]\nname = \"{name}\"\nnamespace = \"{ns}\"\ntoken_sha256 = \"{}\"\nadmin = {admin}\n",
            hash(token)
        );
    }
    out
}

/// A free port on 127.0.0.1.
pub(crate) fn free_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

/// The `idemgate key-service` binary, killed on drop.
pub(crate) struct KeyServiceProcess {
    pub(crate) child: std::process::Child,
    pub(crate) addr: String,
    pub(crate) dir: tempfile::TempDir,
}

impl KeyServiceProcess {
    /// `http://addr`.
    pub(crate) fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Kills the process (a real crash: SIGKILL).
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for KeyServiceProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts the binary on a SQLite file in a temporary directory (or on `store`), once it
/// accepts connections.
pub(crate) async fn spawn(store: Option<&str>, addr: Option<&str>) -> KeyServiceProcess {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite://{}", dir.path().join("ks.db").display());
    let addr = addr.map_or_else(free_addr, str::to_owned);
    let config = dir.path().join("ks.toml");
    std::fs::write(
        &config,
        config_text(store.unwrap_or(&sqlite), &addr, "purge_interval = \"0s\""),
    )
    .unwrap();
    let child = start(&config);
    wait_for(&addr).await;
    KeyServiceProcess { child, addr, dir }
}

/// Starts `idemgate key-service --config FILE`.
pub(crate) fn start(config: &Path) -> std::process::Child {
    let stderr = match std::env::var_os("IDEMGATE_TEST_GATEWAY_STDERR") {
        Some(_) => std::process::Stdio::inherit(),
        None => std::process::Stdio::null(),
    };
    command(config).stderr(stderr).spawn().unwrap()
}

/// The `idemgate key-service --config FILE` command, stdout discarded.
pub(crate) fn command(config: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"));
    cmd.arg("key-service")
        .arg("--config")
        .arg(config)
        .stdout(std::process::Stdio::null());
    cmd
}

/// Waits until `addr` accepts connections (10 s at most).
pub(crate) async fn wait_for(addr: &str) {
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the key service did not start on {addr}");
}

/// The Python interpreter of the test venv, or `None` (and why) when unset.
pub(crate) fn python() -> Option<PathBuf> {
    match std::env::var_os("IDEMGATE_TEST_PYTHON") {
        Some(p) => Some(PathBuf::from(p)),
        None => {
            eprintln!("skipped: IDEMGATE_TEST_PYTHON is unset (scripts/test.d/python.sh sets it)");
            None
        }
    }
}

/// `crates/idemgate-gateway/tests/python/key_service/`.
pub(crate) fn python_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/key_service")
}
