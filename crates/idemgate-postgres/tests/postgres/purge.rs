//! Purging many expired rows in bounded batches while fresh keys keep being inserted.
//!
//! `IDEMGATE_PURGE_ROWS` sets how many expired rows are seeded (default 20,000), e.g.
//! `IDEMGATE_PURGE_ROWS=1000000 cargo test --release -p idemgate-postgres --test postgres
//! purge -- --nocapture`. Timings are printed, never asserted.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idemgate_core::testing::{fp, inserted, request, response};
use idemgate_core::{IdempotencyKey, IdempotencyStore, ScopedKey};
use idemgate_postgres::PostgresStore;
use tokio::time::Instant;

use crate::{common, DAY, LONG};

const BATCH: u32 = 1000;
const LIVE: usize = 200;

fn key(prefix: &str, n: usize) -> ScopedKey {
    ScopedKey {
        principal: "purge".into(),
        route: "POST /payments".into(),
        key: IdempotencyKey::new(&format!("{prefix}-{n:08}")).unwrap(),
    }
}

/// Runs `sql` with `$1 = bind` in a transaction without the store's statement timeout
/// (seeding and counting a million rows take longer than a store call may).
async fn unbounded(store: &PostgresStore, sql: &str, bind: Option<i64>) -> Option<i64> {
    let mut tx = store.pool().begin().await.unwrap();
    sqlx::raw_sql("SET LOCAL statement_timeout = 0")
        .execute(&mut *tx)
        .await
        .unwrap();
    let mut query = sqlx::query_scalar(sql);
    if let Some(bind) = bind {
        query = query.bind(bind);
    }
    let out = query.fetch_optional(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    out
}

/// Seeds `rows` expired records (all three states) with one `INSERT ... SELECT`.
async fn seed_expired(store: &PostgresStore, rows: i64) {
    let sql = format!(
        "INSERT INTO \"{}\" (user_id, route, key, request_hash, fingerprint_version, state, \
         status, response_headers, response, replayable, lease_token, lease_expires_at, fence, \
         created_at, completed_at, expires_at) \
         SELECT 'purge', 'POST /payments', 'expired-' || g, decode(repeat('01', 32), 'hex'), \
         1, s.state, CASE WHEN s.state = 'completed' THEN 201 END, \
         CASE WHEN s.state = 'completed' THEN ''::bytea END, \
         CASE WHEN s.state = 'completed' THEN convert_to(repeat('x', 200), 'UTF8') END, \
         CASE WHEN s.state = 'completed' THEN true END, \
         CASE WHEN s.state = 'in_progress' THEN g END, \
         CASE WHEN s.state = 'in_progress' THEN now() - interval '2 days' END, 1, \
         now() - interval '2 days', CASE WHEN s.state <> 'in_progress' THEN now() END, \
         now() - interval '1 day' - g * interval '1 millisecond' \
         FROM generate_series(1, $1::bigint) g, LATERAL (SELECT (ARRAY['completed', \
         'failed', 'in_progress'])[1 + g % 3] AS state) s",
        store.table_name()
    );
    unbounded(store, &sql, Some(rows)).await;
    let analyze = format!("ANALYZE \"{}\"", store.table_name());
    let mut tx = store.pool().begin().await.unwrap();
    sqlx::raw_sql(&format!("SET LOCAL statement_timeout = 0; {analyze}"))
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

/// Inserts and completes fresh keys until `stop`; returns each insert's latency.
async fn insert_loop(store: PostgresStore, stop: Arc<AtomicBool>, start: usize) -> Vec<Duration> {
    let mut latencies = Vec::new();
    let mut n = start;
    while !stop.load(Ordering::Relaxed) {
        let k = key("during", n);
        let began = Instant::now();
        let out = store
            .insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap();
        latencies.push(began.elapsed());
        let lease = inserted(out);
        store.complete(&lease, &response(64)).await.unwrap();
        n += 1;
    }
    latencies
}

fn summary(mut latencies: Vec<Duration>, what: &str) -> String {
    latencies.sort();
    if latencies.is_empty() {
        return "no samples".into();
    }
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    format!(
        "{} {what}, median {:?}, p99 {:?}, max {:?}",
        latencies.len(),
        at(0.5),
        at(0.99),
        latencies[latencies.len() - 1]
    )
}

async fn count(store: &PostgresStore, filter: &str) -> i64 {
    let sql = format!(
        "SELECT count(*) FROM \"{}\" WHERE {filter}",
        store.table_name()
    );
    unbounded(store, &sql, None).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_many_expired_rows_while_acquiring() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let rows: i64 = std::env::var("IDEMGATE_PURGE_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let began = Instant::now();
    seed_expired(&store, rows).await;
    println!("purge: seeded {rows} expired rows in {:?}", began.elapsed());
    for n in 0..LIVE {
        let lease = inserted(
            store
                .insert_or_get(&request(&key("live", n), fp(1), LONG, DAY))
                .await
                .unwrap(),
        );
        if n % 2 == 0 {
            store.complete(&lease, &response(64)).await.unwrap();
        }
    }

    // Baseline: insert latency with no purge running.
    let stop = Arc::new(AtomicBool::new(false));
    let baseline = tokio::spawn(insert_loop(store.clone(), stop.clone(), 0));
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let baseline = baseline.await.unwrap();
    let before = baseline.len();

    let stop = Arc::new(AtomicBool::new(false));
    let during = tokio::spawn(insert_loop(store.clone(), stop.clone(), before));
    let began = Instant::now();
    let (mut purged, mut batch_times) = (0, Vec::new());
    loop {
        let batch_began = Instant::now();
        let n = store
            .purge_expired(NonZeroU32::new(BATCH).unwrap())
            .await
            .unwrap();
        if n == 0 {
            break;
        }
        batch_times.push(batch_began.elapsed());
        purged += n;
    }
    let elapsed = began.elapsed();
    stop.store(true, Ordering::Relaxed);
    let during = during.await.unwrap();
    let inserted_during = during.len();
    let batches = batch_times.len();
    println!(
        "purge: {purged} rows in {batches} batches of {BATCH} in {elapsed:?} ({:.0} rows/s)",
        purged as f64 / elapsed.as_secs_f64()
    );
    let tenth = (batches / 10).max(1);
    let mean = |times: &[Duration]| times.iter().sum::<Duration>() / times.len().max(1) as u32;
    println!(
        "purge: mean batch time, first tenth {:?}, last tenth {:?}; {}",
        mean(&batch_times[..tenth.min(batches)]),
        mean(&batch_times[batches.saturating_sub(tenth)..]),
        summary(batch_times, "batches"),
    );
    println!(
        "purge: insert latency without purge: {}",
        summary(baseline, "inserts")
    );
    println!(
        "purge: insert latency during purge:  {}",
        summary(during, "inserts")
    );

    assert_eq!(purged, rows as u64);
    assert_eq!(count(&store, "key LIKE 'expired-%'").await, 0);
    assert_eq!(count(&store, "key LIKE 'live-%'").await, LIVE as i64);
    let fresh = (before + inserted_during) as i64;
    assert_eq!(
        count(&store, "key LIKE 'during-%' AND state = 'completed'").await,
        fresh
    );
    for n in [0, LIVE - 1] {
        assert!(store.get(&key("live", n)).await.unwrap().is_some());
    }
}
