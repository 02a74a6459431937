//! The Python interpreter of the test environment (`IDEMGATE_TEST_PYTHON`, set by
//! `scripts/test.d/python.sh`), and the project's test data.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

/// The interpreter, or `None` (after saying why) when the variable is unset.
pub(crate) fn python(test: &str) -> Option<PathBuf> {
    match std::env::var_os("IDEMGATE_TEST_PYTHON") {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => {
            eprintln!("{test}: skipped: IDEMGATE_TEST_PYTHON is unset (scripts/test.d/python.sh prepares the environment and sets it)");
            None
        }
    }
}

/// A file of `tests/data`.
pub(crate) fn data(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(path)
}

/// Runs `cmd` on a blocking thread, killed after `limit`; its output.
pub(crate) async fn output_within(mut cmd: Command, limit: Duration) -> Output {
    cmd.stdin(std::process::Stdio::null());
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    tokio::time::timeout(limit, cmd.output())
        .await
        .expect("the command finishes in time")
        .expect("the command starts")
}

/// `out` as text, for assertion messages.
pub(crate) fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
}
