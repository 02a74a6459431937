//! The example as a user runs it: the binary in a fresh directory, driven over HTTP.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

struct Server(Child, String, #[allow(dead_code)] tempfile::TempDir);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tower-hyper"))
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
    Server(child, base, dir)
}

async fn order(s: &Server, api_key: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/orders", s.1))
        .header("x-api-key", api_key)
        .header("idempotency-key", "9c1d7e0a-tower-hyper")
        .body(r#"{"sku": "A-1"}"#)
        .send()
        .await
        .unwrap()
}

async fn ran(s: &Server) -> String {
    let url = format!("{}/orders/count", s.1);
    reqwest::get(url).await.unwrap().text().await.unwrap()
}

#[tokio::test]
async fn an_order_runs_once_per_api_key_owner() {
    let s = start();
    let first = order(&s, "key-alice").await;
    assert_eq!(first.status(), 201);
    let body = first.text().await.unwrap();
    let retry = order(&s, "key-alice").await;
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.text().await.unwrap(), body);
    assert_eq!(ran(&s).await, "1");
    let bob = order(&s, "key-bob").await;
    assert_eq!(bob.status(), 201);
    assert!(bob.headers().get("idempotent-replayed").is_none());
    let unknown = order(&s, "key-mallory").await;
    assert_eq!(unknown.status(), 401);
    assert_eq!(
        unknown.headers()["content-type"],
        "application/problem+json"
    );
    assert_eq!(ran(&s).await, "2");
}
