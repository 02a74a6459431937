//! The gateway on the Redis store: this machine's server (`IDEMGATE_TEST_REDIS_URL`) with a
//! key prefix per test, and a private `redis-server` that a test stops and starts again.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::*;

fn redis_url() -> Option<String> {
    test_url("IDEMGATE_TEST_REDIS_URL")
}

fn prefix() -> String {
    format!("idemgate-gw-test:{:012x}:", rand_u64() >> 16)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_duplicates_run_once() {
    let Some(url) = redis_url() else { return };
    let up = upstream().await;
    let p = prefix();
    let gw = gateway(&up.base, &url, |c| c.store_key_prefix = p.clone()).await;
    let k = key();
    let tasks: Vec<_> = (0..200)
        .map(|_| tokio::spawn(post(&gw.base, "/payments?delay_ms=300", Some(&k), "{}").send()))
        .collect();
    for task in tasks {
        let status = task.await.unwrap().unwrap().status().as_u16();
        assert!(status == 201 || status == 409, "unexpected {status}");
    }
    assert_eq!(up.count(), 1);
    let replay = post(&gw.base, "/payments?delay_ms=300", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    delete_redis_prefix(&url, &p).await;
}

/// The documented weakness: a record Redis loses (eviction, failover, no persistence) is
/// gone, and a retry of its key runs the operation again.
#[tokio::test]
async fn a_lost_record_means_the_retry_runs_again() {
    let Some(url) = redis_url() else { return };
    let up = upstream().await;
    let p = prefix();
    let gw = gateway(&up.base, &url, |c| c.store_key_prefix = p.clone()).await;
    let k = key();
    post(&gw.base, "/payments", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    let replay = post(&gw.base, "/payments", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");

    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{p}*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(keys.len(), 1, "one Redis key per record");
    let _: () = redis::cmd("DEL")
        .arg(&keys)
        .query_async(&mut conn)
        .await
        .unwrap();

    let again = post(&gw.base, "/payments", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 201);
    assert!(again.headers().get("idempotent-replayed").is_none());
    assert_eq!(
        up.count(),
        2,
        "the record was lost, so the operation ran again"
    );
    delete_redis_prefix(&url, &p).await;
}

struct RedisServer(Child);

impl RedisServer {
    async fn start(port: u16) -> Self {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server is installed");
        let server = Self(child);
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("redis-server did not start on {port}");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_is_503_and_recovers_without_a_restart() {
    if redis_url().is_none() {
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = RedisServer::start(port).await;
    let up = upstream().await;
    let gw = gateway(&up.base, &format!("redis://127.0.0.1:{port}"), |_| {}).await;
    assert_eq!(
        post(&gw.base, "/payments", Some(&key()), "{}")
            .send()
            .await
            .unwrap()
            .status(),
        201
    );

    drop(server); // stopped
    for _ in 0..3 {
        let resp = post(&gw.base, "/payments", Some(&key()), "{}")
            .send()
            .await
            .unwrap();
        assert_problem(resp, 503, "store-unavailable").await;
    }
    assert_eq!(up.count(), 1, "nothing forwarded while Redis is down");

    let _server = RedisServer::start(port).await;
    let status = status_once_recovered(&gw.base).await;
    assert_eq!(status, 201, "traffic recovers without a restart");
    assert_eq!(up.count(), 2);
}
