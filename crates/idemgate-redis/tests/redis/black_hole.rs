//! A server that accepts connections and never answers (a black hole: a hung process, a
//! dropped route, a full accept queue) fails store calls in bounded time instead of
//! hanging them: the connection and response timeouts of `RedisOptions` (2 s each by
//! default) are configured on both connection kinds.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idemgate_core::testing::{fp, inserted, request, response, unique_key};
use idemgate_core::{IdempotencyStore, LeaseToken, StoreError};
use idemgate_redis::{RedisOptions, RedisStore, RedisStoreError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use crate::common::{self, Cleanup, TestStore};
use crate::{DAY, LONG};

/// Far above the 2 s timeouts, far below "hangs".
const BOUND: Duration = Duration::from_secs(10);

/// A local listener that relays to `upstream` until [`BlackHole::swallow`], then reads
/// everything it is sent and never forwards or answers anything; with no upstream it is a
/// black hole from the start. Private to the test: nothing else connects to it.
struct BlackHole {
    url: String,
    swallowing: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl BlackHole {
    async fn start(upstream: Option<String>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("redis://{}", listener.local_addr().unwrap());
        let swallowing = Arc::new(AtomicBool::new(upstream.is_none()));
        let flag = swallowing.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, upstream.clone(), flag.clone()));
            }
        });
        Self {
            url,
            swallowing,
            task,
        }
    }

    /// From now on nothing is forwarded or answered, on old and new connections alike.
    fn swallow(&self) {
        self.swallowing.store(true, Ordering::SeqCst);
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One client connection: relayed to `upstream` while `swallowing` is false.
async fn relay(client: TcpStream, upstream: Option<String>, swallowing: Arc<AtomicBool>) {
    let (mut from_client, mut to_client) = client.into_split();
    let upstream = match upstream.filter(|_| !swallowing.load(Ordering::SeqCst)) {
        Some(addr) => TcpStream::connect(addr).await.ok(),
        None => None,
    };
    let Some(upstream) = upstream else {
        // a black hole: read until the client gives up, answer nothing
        let mut buf = [0; 4096];
        while matches!(from_client.read(&mut buf).await, Ok(n) if n > 0) {}
        return;
    };
    let (mut from_server, mut to_server) = upstream.into_split();
    let back = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
    });
    let mut buf = [0; 4096];
    while let Ok(n @ 1..) = from_client.read(&mut buf).await {
        if !swallowing.load(Ordering::SeqCst) && to_server.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    back.abort();
}

fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, hosts)| hosts);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

fn timed_out<T: std::fmt::Debug>(what: &str, r: Result<T, StoreError>, started: Instant) {
    println!("{what}: {r:?} after {:?}", started.elapsed());
    assert!(
        matches!(r, Err(StoreError::Timeout | StoreError::Unavailable(_))),
        "{what}: {r:?}"
    );
    assert!(
        started.elapsed() < BOUND,
        "{what} took {:?}",
        started.elapsed()
    );
}

/// Connecting to a black hole fails in bounded time, on one node and as a cluster seed.
#[tokio::test]
async fn connecting_to_a_black_hole_fails_in_time() {
    let hole = BlackHole::start(None).await;
    let started = Instant::now();
    let err = RedisStore::connect(&hole.url).await.unwrap_err();
    println!("single: {err:?} after {:?}", started.elapsed());
    assert!(matches!(err, RedisStoreError::Redis(_)), "{err:?}");
    assert!(started.elapsed() < BOUND, "single: {:?}", started.elapsed());

    let started = Instant::now();
    let err = RedisStore::connect_cluster(&[&hole.url], &RedisOptions::default())
        .await
        .unwrap_err();
    println!("cluster: {err:?} after {:?}", started.elapsed());
    assert!(matches!(err, RedisStoreError::Redis(_)), "{err:?}");
    assert!(
        started.elapsed() < BOUND,
        "cluster: {:?}",
        started.elapsed()
    );
}

/// A connected store whose server turns into a black hole: every primitive fails with
/// `Timeout` (or `Unavailable` once the connection is given up) within the bound.
#[tokio::test]
async fn a_server_that_stops_answering_fails_each_call_in_time() {
    let Some(url) = common::url() else {
        return;
    };
    let hole = BlackHole::start(Some(host_port(&url))).await;
    let store = RedisStore::connect(&hole.url)
        .await
        .expect("connect through the relay")
        .with_key_prefix(&common::prefix())
        .unwrap();
    // the keys live on the real server: delete them from there
    let store = TestStore::new(store, Cleanup::Single(url));
    let k = unique_key("alice");
    let lease = inserted(
        store
            .insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    let seen = store.get(&k).await.unwrap().expect("stored");
    hole.swallow();

    let started = Instant::now();
    let other = request(&unique_key("alice"), fp(1), LONG, DAY);
    timed_out("insert_or_get", store.insert_or_get(&other).await, started);
    let started = Instant::now();
    let taken = store.take_over(&seen, LeaseToken::random(), LONG).await;
    timed_out("take_over", taken, started);
    let started = Instant::now();
    timed_out("renew", store.renew(&lease, LONG).await, started);
    let started = Instant::now();
    timed_out(
        "complete",
        store.complete(&lease, &response(1)).await,
        started,
    );
    let started = Instant::now();
    timed_out("get", store.get(&k).await, started);
    let started = Instant::now();
    timed_out("ping", store.ping().await, started);
}
