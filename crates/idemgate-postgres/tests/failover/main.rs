//! The store against a real primary and streaming standby (`scripts/cluster/postgres.sh`,
//! built from this machine's PostgreSQL binaries): host lists, failover, and the identity
//! checks of new connections. Skipped (each case prints why) when no `initdb` is installed.
//! Each case runs its own cluster, stopped and deleted when the case ends, passed or failed.

mod cluster;
mod follow;
mod hosts;
mod identity;
mod journal;
mod relay;
mod takeover;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Once};
use std::time::Duration;

use idemgate_core::testing::{fp, inserted, request, response, unique_key};
use idemgate_core::{IdempotencyRecord, IdempotencyStore, RecordState, ScopedKey};
use idemgate_postgres::PostgresStore;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use tokio::time::Instant;

const DAY: Duration = Duration::from_secs(86_400);

/// `idempotency_store_failovers_total{backend="postgres"}`, counted by [`Failovers`].
static FAILOVERS: LazyLock<Arc<AtomicU64>> = LazyLock::new(Arc::default);

/// A recorder that keeps the failover counter and drops everything else.
struct Failovers;

impl Recorder for Failovers {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let postgres = key
            .labels()
            .any(|l| l.key() == "backend" && l.value() == "postgres");
        match key.name() == "idempotency_store_failovers_total" && postgres {
            true => Counter::from_arc(FAILOVERS.clone()),
            false => Counter::noop(),
        }
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// The failovers counted so far by every store of this process (cases run in parallel:
/// compare with `>=`).
fn failovers() -> u64 {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| metrics::set_global_recorder(Failovers).expect("no other recorder"));
    FAILOVERS.load(Ordering::SeqCst)
}

/// A store on `url` with the records table migrated.
async fn store(url: &str) -> PostgresStore {
    let store = PostgresStore::connect(url).await.expect("connect");
    store.migrate().await.expect("migrate");
    store
}

/// Writes `n` completed records; returns their keys.
async fn write_keys(store: &PostgresStore, n: usize) -> Vec<ScopedKey> {
    let mut keys = Vec::new();
    for _ in 0..n {
        let key = unique_key("alice");
        let req = request(&key, fp(1), Duration::from_secs(30), DAY);
        let lease = inserted(store.insert_or_get(&req).await.expect("insert"));
        store
            .complete(&lease, &response(16))
            .await
            .expect("complete");
        keys.push(key);
    }
    keys
}

/// The record of `key`, which must be completed.
async fn completed(store: &PostgresStore, key: &ScopedKey) -> IdempotencyRecord {
    let record = store
        .get(key)
        .await
        .expect("get")
        .expect("the record is there");
    assert_eq!(record.state, RecordState::Completed, "{key:?}");
    record
}

/// The port of the server behind `n` connections of the pool held at once.
async fn server_ports(store: &PostgresStore, n: usize) -> Vec<i32> {
    let mut held = Vec::new();
    let mut ports = Vec::new();
    for _ in 0..n {
        let mut conn = store.pool().acquire().await.expect("acquire");
        let port: i32 = sqlx::query_scalar("SELECT inet_server_port()")
            .fetch_one(&mut *conn)
            .await
            .expect("inet_server_port()");
        ports.push(port);
        held.push(conn);
    }
    ports
}

/// Calls `f` until it returns `Some`, every 100 ms for at most `limit`.
async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = f().await {
            return value;
        }
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the standby on `port` has at least `n` rows in `table` (replayed).
async fn replicated(port: u16, table: &str, n: i64) {
    use sqlx::Connection;
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let sql = format!("SELECT count(*) FROM \"{table}\"");
    eventually(
        Duration::from_secs(10),
        "the standby replays the records",
        || async {
            let mut conn = sqlx::PgConnection::connect(&url).await.ok()?;
            let count: i64 = sqlx::query_scalar(&sql).fetch_one(&mut conn).await.ok()?;
            (count >= n).then_some(())
        },
    )
    .await;
}

/// A port of 127.0.0.1 nothing listens on (bound, then released).
fn dead_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}
