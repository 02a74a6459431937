//! Keeping the table small: migration 0003's autovacuum settings and in-progress index,
//! the purge keeping pace with inserts, and the gauges on a table past the exact-count
//! threshold (catalog statistics).

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idemgate_core::testing::{fp, inserted, request, response, unique_key};
use idemgate_core::{GaugedStore, IdempotencyStore, StoreError};
use idemgate_postgres::{PostgresStore, EXACT_COUNT_BELOW};

use crate::common;

async fn scalar(store: &PostgresStore, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(store.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn the_migration_tunes_autovacuum_and_indexes_in_progress_records() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let t = store.table_name();
    let options: Vec<String> = sqlx::query_scalar(&format!(
        "SELECT unnest(reloptions) FROM pg_class WHERE oid = '\"{t}\"'::regclass"
    ))
    .fetch_all(store.pool())
    .await
    .unwrap();
    for want in [
        "autovacuum_vacuum_scale_factor=0.01",
        "autovacuum_vacuum_threshold=1000",
        "autovacuum_analyze_scale_factor=0.02",
    ] {
        assert!(options.iter().any(|o| o == want), "{want} in {options:?}");
    }
    let index = format!("{t}_in_progress_idx");
    let found = scalar(
        &store,
        &format!("SELECT count(*) FROM pg_indexes WHERE indexname = '{index}'"),
    )
    .await;
    assert_eq!(found, 1);
}

/// Inserts (and completes) records that expire after 200 ms while a purge loop runs next
/// to it. The row count sampled along the way stays a small fraction of what was inserted
/// (without a purge it would end at `TOTAL`), and once the last records expired, one more
/// pass leaves the table empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_count_stays_bounded_while_inserts_and_purges_run_together() {
    const TOTAL: usize = 4000;
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let stop = Arc::new(AtomicBool::new(false));
    let purger = {
        let (store, stop) = (store.clone(), stop.clone());
        tokio::spawn(async move {
            let mut purged = 0;
            while !stop.load(Ordering::Relaxed) {
                purged += store
                    .purge_expired(NonZeroU32::new(500).unwrap())
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            purged
        })
    };
    let ttl = Duration::from_millis(200);
    let mut samples = Vec::new();
    for n in 0..TOTAL {
        let out = store
            .insert_or_get(&request(&unique_key("bloat"), fp(1), ttl / 2, ttl))
            .await
            .unwrap();
        // A completion that comes after the record's TTL on this busy machine finds it
        // expired (or purged already): refused, and the record goes all the same.
        match store.complete(&inserted(out), &response(64)).await {
            Ok(()) | Err(StoreError::LeaseLost) => {}
            Err(e) => panic!("complete: {e}"),
        }
        if n % 250 == 249 {
            samples.push(store.gauges().await.unwrap().records());
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut purged = purger.await.unwrap();
    tokio::time::sleep(ttl * 2).await;
    purged += store
        .purge_expired(NonZeroU32::new(10_000).unwrap())
        .await
        .unwrap();
    let max = *samples.iter().max().unwrap();
    println!("bloat: rows sampled {samples:?}");
    assert!(max < (TOTAL / 4) as u64, "rows stayed bounded: {samples:?}");
    assert_eq!(purged, TOTAL as u64, "every record was purged, once");
    let g = store.gauges().await.unwrap();
    assert_eq!((g.records(), g.expired), (0, Some(0)));
    assert!(g.table_bytes.unwrap() > 0);
}

/// Past [`EXACT_COUNT_BELOW`] rows the counts by state come from the statistics
/// (approximate), while in-progress, stuck and expired counts stay exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_table_is_gauged_from_the_statistics() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let rows = EXACT_COUNT_BELOW + 20_000;
    let t = store.table_name();
    // A third of each state; failed and in-progress rows expired, completed ones live;
    // in-progress rows' leases lapsed (stuck) on half of them.
    let seed = format!(
        "SET LOCAL statement_timeout = 0; \
         INSERT INTO \"{t}\" (user_id, route, key, request_hash, fingerprint_version, state, \
         status, lease_token, lease_expires_at, fence, created_at, expires_at) \
         SELECT 'big', 'POST /p', 'k-' || g, decode(repeat('01', 32), 'hex'), 1, \
         (ARRAY['completed', 'failed', 'in_progress'])[1 + g % 3], \
         CASE WHEN g % 3 = 0 THEN 201 END, g, \
         CASE WHEN g % 6 = 2 THEN now() - interval '1 hour' ELSE now() + interval '1 hour' END, \
         1, now() - interval '2 hours', \
         CASE WHEN g % 3 = 1 THEN now() - interval '1 minute' ELSE now() + interval '1 day' END \
         FROM generate_series(1, {rows}) g; ANALYZE \"{t}\";"
    );
    let mut tx = store.pool().begin().await.unwrap();
    sqlx::raw_sql(&seed).execute(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    let third = (rows / 3) as u64;
    let mut g = store.gauges().await.unwrap();
    // The statistics collector reports the inserted rows shortly after the commit.
    for _ in 0..100 {
        if g.approximate {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        g = store.gauges().await.unwrap();
    }
    assert!(g.approximate, "{g:?}");
    let near = |n: u64, want: u64| n.abs_diff(want) <= want / 10;
    assert!(near(g.completed, third) && near(g.failed, third), "{g:?}");
    assert_eq!(g.in_progress, third, "exact, through the partial index");
    assert_eq!(g.stuck_in_progress, third / 2, "exact");
    assert_eq!(g.expired, Some(third), "exact below the cap");
    assert_eq!(
        store
            .count_expired(NonZeroU32::new(1000).unwrap())
            .await
            .unwrap(),
        Some(1000),
        "the dry-run count stops at its limit"
    );
}
