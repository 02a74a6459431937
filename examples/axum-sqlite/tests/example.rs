//! The example as a user runs it: the binary in a fresh directory, driven over HTTP; and
//! the README's "For Rust services" snippet, which must be the example's own lines.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

const KEY: &str = "5d0c3a4e-2f7b-4c1e-9a8d-axum-sqlite";

/// The lines between `// README:begin` and `// README:end` in `text`, unindented.
fn marked(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        match line.trim() {
            "// README:begin" => inside = true,
            "// README:end" => inside = false,
            l if inside => out.push(l.to_owned()),
            _ => {}
        }
    }
    out
}

#[test]
fn the_readme_snippet_is_the_compiled_example() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let section = readme
        .split("\n## For Rust services\n")
        .nth(1)
        .expect("README has a `## For Rust services` section");
    let block = section
        .split("```rust\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("the section opens with a ```rust block");
    let shown: Vec<String> = block
        .lines()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    let main = include_str!("../src/main.rs");
    assert_eq!(
        shown,
        marked(main),
        "README snippet and examples/axum-sqlite differ"
    );
    assert!(shown.len() <= 12, "about ten lines, got {}", shown.len());
}

struct Server {
    child: Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_axum-sqlite"))
        .current_dir(dir.path())
        .env("LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line.trim().rsplit(' ').next().unwrap().to_owned();
    assert!(base.starts_with("http://"), "{line}");
    assert!(dir.path().join("idempotency.db").exists());
    Server {
        child,
        base,
        _dir: dir,
    }
}

async fn pay(
    s: &Server,
    account: &str,
    token: &str,
    extra: Option<(&str, &str)>,
) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(format!("{}/accounts/{account}/payments", s.base))
        .header("authorization", format!("Bearer {token}"))
        .header("idempotency-key", KEY)
        .header("content-type", "application/json")
        .body(r#"{"amount": 1000}"#);
    if let Some((k, v)) = extra {
        req = req.header(k, v);
    }
    req.send().await.unwrap()
}

async fn ran(s: &Server) -> String {
    let url = format!("{}/payments/count", s.base);
    reqwest::get(url).await.unwrap().text().await.unwrap()
}

#[tokio::test]
async fn a_retry_is_replayed_and_runs_once_per_caller_and_route() {
    let s = start();
    let first = pay(&s, "acct-1", "alice-token", None).await;
    assert_eq!(first.status(), 201);
    let body = first.text().await.unwrap();
    // A client-sent principal-looking header is not the source: the scope stays alice's.
    let retry = pay(&s, "acct-1", "alice-token", Some(("x-user-id", "bob"))).await;
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.text().await.unwrap(), body);
    assert_eq!(ran(&s).await, "1");

    // The scope is the template axum matched: the same key on another account of the
    // route is the key reused with another request.
    let other_account = pay(&s, "acct-2", "alice-token", None).await;
    assert_eq!(other_account.status(), 422);
    assert_eq!(
        other_account.headers()["content-type"],
        "application/problem+json"
    );

    // Another caller's key of the same value is another record.
    let bob = pay(&s, "acct-1", "bob-token", None).await;
    assert_eq!(bob.status(), 201);
    assert!(bob.headers().get("idempotent-replayed").is_none());
    assert_eq!(ran(&s).await, "2");

    let stranger = pay(&s, "acct-1", "forged-token", None).await;
    assert_eq!(stranger.status(), 401, "the auth layer runs first");
    assert_eq!(ran(&s).await, "2");
}
