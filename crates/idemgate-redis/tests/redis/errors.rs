//! Failures classified for the HTTP layer: unreachable → `Unavailable` with its source.

use std::error::Error as _;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use idemgate_core::testing::{fp, request, unique_key};
use idemgate_core::{IdempotencyStore, StoreError};
use idemgate_redis::{RedisStore, RedisStoreError};

use crate::{common, DAY, LONG};

/// A port nothing listens on: bound, then closed.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn connecting_to_nothing_fails_as_unavailable() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    let err = RedisStore::connect(&url).await.unwrap_err();
    assert!(matches!(err, RedisStoreError::Redis(_)), "{err:?}");
    let store_err = StoreError::from(err);
    assert!(
        matches!(store_err, StoreError::Unavailable(_)),
        "{store_err:?}"
    );
    assert!(store_err.source().is_some(), "the cause is kept");
}

#[tokio::test]
async fn bad_urls_and_prefixes_are_refused() {
    assert!(matches!(
        RedisStore::connect("http://127.0.0.1:6379").await,
        Err(RedisStoreError::InvalidUrl { .. })
    ));
    let Some(store) = common::fresh_store().await else {
        return;
    };
    assert!(matches!(
        RedisStore::clone(&store).with_key_prefix("tenant{1}:"),
        Err(RedisStoreError::InvalidPrefix { .. })
    ));
}

/// Kills the child on drop (the test's own `redis-server`).
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A server of this test's own that goes away: operations fail fast as `Unavailable`
/// (or `Timeout`), and the store recovers once a server answers on the port again.
#[tokio::test]
async fn a_server_that_goes_away_is_unavailable_then_recovers() {
    if common::url().is_none() {
        return;
    }
    let port = free_port();
    let spawn = || {
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .map(Server)
    };
    let Ok(server) = spawn() else {
        println!("skipping: redis-server is not installed");
        return;
    };
    let url = format!("redis://127.0.0.1:{port}");
    let mut store = None;
    for _ in 0..50 {
        if let Ok(s) = RedisStore::connect(&url).await {
            store = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let store = store.expect("own redis-server answers");
    // the first call loads the script (EVALSHA → NOSCRIPT → SCRIPT LOAD → EVALSHA)
    let first = unique_key("alice");
    store
        .insert_or_get(&request(&first, fp(1), LONG, DAY))
        .await
        .unwrap();
    drop(server);

    let k = unique_key("alice");
    let started = tokio::time::Instant::now();
    for _ in 0..3 {
        let err = store
            .insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::Unavailable(_) | StoreError::Timeout),
            "{err:?}"
        );
        assert!(matches!(
            store.ping().await,
            Err(StoreError::Unavailable(_))
        ));
    }
    assert!(started.elapsed() < Duration::from_secs(5), "fails fast");

    let _server = spawn().unwrap();
    let mut recovered = false;
    for _ in 0..100 {
        if store.ping().await.is_ok() {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(recovered, "the connection manager reconnects");
    // a new server has an empty script cache: the scripts are loaded again
    store
        .insert_or_get(&request(&k, fp(1), LONG, DAY))
        .await
        .unwrap();
}
