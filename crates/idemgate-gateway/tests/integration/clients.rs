//! The recipes of `docs/clients.md`, taken from the page itself and run against the real
//! gateway in front of the example payments API, with a charge (2.5 s) longer than the
//! recipes' per-attempt timeout (1 s): each logical operation charges exactly once and the
//! client ends with the stored response. Python and curl always run (Python needs
//! `IDEMGATE_TEST_PYTHON`); JavaScript runs under `node` and Go under `IDEMGATE_TEST_GO` (or
//! `go` on the PATH) when they are installed, and say so when they are not.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::openapi::payments_gateway;
use crate::support::{output_within, python, text};

/// The recipe named `name` (`<!-- recipe: NAME -->` before its fenced block).
fn recipe(name: &str) -> String {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/clients.md"
    ))
    .unwrap();
    let marker = format!("<!-- recipe: {name} -->");
    let after = &page[page
        .find(&marker)
        .unwrap_or_else(|| panic!("{marker} in docs/clients.md"))
        + marker.len()..];
    let fence = after
        .trim_start()
        .strip_prefix("```")
        .expect("a fenced block follows");
    let code = &fence[fence.find('\n').unwrap() + 1..];
    code[..code.find("\n```").expect("the block ends")].to_owned() + "\n"
}

/// Runs `program args... FILE` on the recipe `name` against a fresh gateway; the recipe's
/// last stdout line as JSON. Asserts one charge.
async fn run(name: &str, program: &Path, args: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(name);
    std::fs::write(&file, recipe(name)).unwrap();
    let (gw, ledger) = payments_gateway().await;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .arg(&file)
        .current_dir(dir.path())
        .env(
            "PAYMENTS_URL",
            format!("{}/payments?delay_ms=2500", gw.base),
        )
        .env("API_TOKEN", "recipe-test")
        .env("HOME", dir.path())
        .env("GOCACHE", go_cache())
        .env("GOPATH", dir.path().join("gopath"));
    let out = output_within(cmd, Duration::from_secs(120)).await;
    // Let the first attempt's charge (still running if the recipe gave up early) land.
    tokio::time::sleep(Duration::from_millis(2700)).await;
    let charges = ledger.count();
    gw.stop().await;
    assert!(out.status.success(), "{name} failed: {}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("{name} printed {stdout}"));
    let result: serde_json::Value = serde_json::from_str(last).unwrap();
    assert_eq!(
        charges,
        1,
        "{name}: one charge per logical operation: {}",
        text(&out)
    );
    result
}

fn go_cache() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("go-cache")
}

fn assert_stored_charge(name: &str, result: &serde_json::Value) {
    assert_eq!(result["status"], 201, "{name}: {result}");
    assert_eq!(result["body"]["id"], "pay_1", "{name}: {result}");
    assert_eq!(result["body"]["amount"], 1000, "{name}: {result}");
    // Every attempt timed out before the charge was done, so the answer is the replay.
    assert_eq!(result["replayed"], true, "{name}: {result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_requests_recipe_charges_once() {
    let Some(python) = python("python_requests_recipe_charges_once") else {
        return;
    };
    let result = run("payment_requests.py", &python, &[]).await;
    assert_stored_charge("payment_requests.py", &result);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_httpx_recipe_charges_once() {
    let Some(python) = python("python_httpx_recipe_charges_once") else {
        return;
    };
    let result = run("payment_httpx.py", &python, &[]).await;
    assert_stored_charge("payment_httpx.py", &result);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_recipe_charges_once() {
    let result = run("curl.sh", Path::new("sh"), &[]).await;
    assert_eq!(result["id"], "pay_1", "{result}");
    assert_eq!(result["status"], "succeeded", "{result}");
}

/// `program` when it runs (`--version` answers), else `None` after saying so.
fn tool(test: &str, program: &str, version_flag: &str) -> Option<PathBuf> {
    match Command::new(program).arg(version_flag).output() {
        Ok(out) if out.status.success() => Some(PathBuf::from(program)),
        _ => {
            eprintln!("{test}: NOT RUN: `{program}` is not installed");
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_fetch_recipe_charges_once() {
    let Some(node) = tool("javascript_fetch_recipe_charges_once", "node", "--version") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fetch.mjs");
    std::fs::write(&file, recipe("fetch.mjs")).unwrap();
    let check = Command::new(&node)
        .arg("--check")
        .arg(&file)
        .output()
        .unwrap();
    assert!(check.status.success(), "node --check: {}", text(&check));
    let result = run("fetch.mjs", &node, &[]).await;
    assert_stored_charge("fetch.mjs", &result);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_net_http_recipe_charges_once() {
    let go = std::env::var("IDEMGATE_TEST_GO").unwrap_or_else(|_| "go".into());
    let Some(go) = tool("go_net_http_recipe_charges_once", &go, "version") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("main.go");
    std::fs::write(&file, recipe("main.go")).unwrap();
    let mut vet = Command::new(&go);
    vet.arg("vet")
        .arg(&file)
        .env("GOCACHE", go_cache())
        .env("HOME", dir.path());
    let vet = output_within(vet, Duration::from_secs(300)).await;
    assert!(vet.status.success(), "go vet: {}", text(&vet));
    let result = run("main.go", &go, &["run"]).await;
    assert_stored_charge("main.go", &result);
}
