//! `encryption_key_files` and the stores' own logs: PostgreSQL's WAL (on the primary and its
//! streaming standby) and Redis's append-only file hold a sealed response's bytes only sealed.
//! Each test first shows that its check finds a response stored in clear.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::replication::Cluster;
use crate::support::*;

/// A key file of 64 hex digits.
fn key_file(dir: &Path) -> String {
    let hex: String = (0..32u8).map(|i| format!("{:02x}", i * 5 + 3)).collect();
    let path = dir.join("wal.key");
    std::fs::write(&path, hex).unwrap();
    path.display().to_string()
}

/// Sends a request whose answer holds a fresh marker through a gateway on `store`, with
/// `keys` as `encryption_key_files`, and replays it; returns the marker.
async fn stored_marker(up: &Upstream, store: &str, table: &str, keys: Vec<String>) -> String {
    let gw = gateway(&up.base, store, |c| {
        c.store_table = table.to_owned();
        c.store_key_prefix = format!("{table}:");
        c.encryption_key_files = keys;
    })
    .await;
    let (k, secret) = (key(), format!("LOG-MARKER-{:016x}", rand_u64()));
    let body = format!("{{\"card\":\"{secret}\"}}");
    for _ in 0..2 {
        let answer = post(&gw.base, "/payments", Some(&k), &body)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 201);
        assert!(answer.text().await.unwrap().contains(&secret));
    }
    gw.stop().await;
    secret
}

/// Every file under `dir`, read (unreadable ones skipped).
fn files_hold(dir: &Path, secret: &str) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        let path = e.path();
        match path.is_dir() {
            true => files_hold(&path, secret),
            false => std::fs::read(&path)
                .is_ok_and(|b| b.windows(secret.len()).any(|w| w == secret.as_bytes())),
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_wal_on_primary_and_standby_holds_no_response_in_clear() {
    let Some(cluster) = Cluster::start("sync") else {
        return;
    };
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let url = Cluster::url(cluster.primary);
    let table = crate::replication::table();
    let clear = stored_marker(&up, &url, &table, Vec::new()).await;
    let sealed = stored_marker(&up, &url, &table, vec![key_file(dir.path())]).await;
    // A synchronous standby has flushed each commit's WAL before the commit returns.
    for node in ["primary", "standby"] {
        let wal = cluster.dir.join(node).join("pg_wal");
        assert!(
            files_hold(&wal, &clear),
            "the check finds a response in clear ({node})"
        );
        assert!(
            !files_hold(&wal, &sealed),
            "{node}'s WAL holds a sealed response in clear"
        );
    }
}

struct AofRedis(Child);

impl Drop for AofRedis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_append_only_file_holds_no_response_in_clear() {
    if test_url("IDEMGATE_TEST_REDIS_URL").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let addr = crate::support::key_service::free_addr();
    let port = addr.rsplit(':').next().unwrap().to_owned();
    let child = Command::new("redis-server")
        .args(["--port", &port, "--bind", "127.0.0.1", "--save", ""])
        .args(["--appendonly", "yes", "--appendfsync", "always"])
        .arg("--dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server is installed");
    let _server = AofRedis(child);
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(&addr).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let up = upstream().await;
    let keys = tempfile::tempdir().unwrap();
    let url = format!("redis://{addr}");
    let clear = stored_marker(&up, &url, "aof", Vec::new()).await;
    let sealed = stored_marker(&up, &url, "aof", vec![key_file(keys.path())]).await;
    assert!(
        files_hold(dir.path(), &clear),
        "the check finds a response in clear"
    );
    assert!(
        !files_hold(dir.path(), &sealed),
        "the AOF holds a sealed response in clear"
    );
}
