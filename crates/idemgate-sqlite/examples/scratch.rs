#![allow(missing_docs, clippy::disallowed_types)]
use idemgate_core::testing::{fp, request, response, unique_key};
use idemgate_core::{AcquireOutcome, IdempotencyStore};
use idemgate_sqlite::{SqliteOptions, SqliteStore};
use std::time::{Duration, Instant};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("b.db"), SqliteOptions::default()).unwrap();
    let n = 20000;
    let t = Instant::now();
    for _ in 0..n {
        store.ping().await.unwrap();
    }
    println!("ping {:?}/op", t.elapsed() / n);
    let k = unique_key("x");
    let t = Instant::now();
    for _ in 0..n {
        store.get(&k).await.unwrap();
    }
    println!("get missing {:?}/op", t.elapsed() / n);
    let resp = response(256);
    let mut acq = Duration::ZERO;
    let mut comp = Duration::ZERO;
    for _ in 0..n {
        let k = unique_key("bench");
        let req = request(
            &k,
            fp(1),
            Duration::from_secs(10),
            Duration::from_secs(86400),
        );
        let t = Instant::now();
        let AcquireOutcome::Acquired { lease, .. } = store.acquire(&req).await.unwrap() else {
            panic!()
        };
        let t2 = Instant::now();
        store.complete(&lease, &resp).await.unwrap();
        acq += t2 - t;
        comp += t2.elapsed();
    }
    println!("acquire {:?}/op complete {:?}/op", acq / n, comp / n);
    // raw sqlite for comparison
    let conn = rusqlite::Connection::open(dir.path().join("b.db")).unwrap();
    conn.pragma_update(None, "synchronous", "NORMAL").unwrap();
    let t = Instant::now();
    for i in 0..n {
        conn.execute("BEGIN IMMEDIATE", []).unwrap();
        conn.prepare_cached("UPDATE idempotency_records SET fence = fence WHERE rowid = ?1")
            .unwrap()
            .execute([i as i64])
            .unwrap();
        conn.execute("COMMIT", []).unwrap();
    }
    println!("raw trivial write txn {:?}/op", t.elapsed() / n);
    let keys: Vec<(String, String, String)> = conn
        .prepare("SELECT principal, route, key FROM idempotency_records LIMIT 5000")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    let t = Instant::now();
    for (p, r, k) in &keys {
        conn.prepare_cached("UPDATE idempotency_records SET completed_at = completed_at + 1 WHERE principal=?1 AND route=?2 AND key=?3").unwrap().execute((p, r, k)).unwrap();
    }
    println!(
        "raw autocommit update by key {:?}/op",
        t.elapsed() / keys.len() as u32
    );
    let body = vec![7u8; 256];
    let t = Instant::now();
    for (p, r, k) in &keys {
        conn.prepare_cached("UPDATE idempotency_records SET response_body = ?4 WHERE principal=?1 AND route=?2 AND key=?3").unwrap().execute((p, r, k, &body)).unwrap();
    }
    println!(
        "raw autocommit update body {:?}/op",
        t.elapsed() / keys.len() as u32
    );
    for (name, pragma) in [
        ("no autocheckpoint", "PRAGMA wal_autocheckpoint=0"),
        (
            "cache 64MiB + autockpt",
            "PRAGMA wal_autocheckpoint=1000; PRAGMA cache_size=-65536",
        ),
        (
            "cache 64MiB, no ckpt",
            "PRAGMA wal_autocheckpoint=0; PRAGMA cache_size=-65536",
        ),
    ] {
        conn.execute_batch(pragma).unwrap();
        let t = Instant::now();
        for (p, r, k) in &keys {
            conn.prepare_cached("UPDATE idempotency_records SET completed_at = completed_at + 1 WHERE principal=?1 AND route=?2 AND key=?3").unwrap().execute((p, r, k)).unwrap();
        }
        println!(
            "{name}: update by key {:?}/op",
            t.elapsed() / keys.len() as u32
        );
        let t = Instant::now();
        for (p, r, k) in &keys {
            conn.prepare_cached(
                "SELECT fence FROM idempotency_records WHERE principal=?1 AND route=?2 AND key=?3",
            )
            .unwrap()
            .query_row((p, r, k), |r| r.get::<_, i64>(0))
            .unwrap();
        }
        println!(
            "{name}: select by key {:?}/op",
            t.elapsed() / keys.len() as u32
        );
    }
    let t = Instant::now();
    conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE)")
        .unwrap();
    println!("checkpoint {:?}", t.elapsed());
    let t = Instant::now();
    for _ in 0..5000 {
        let t0 = Instant::now();
        conn.execute("BEGIN IMMEDIATE", []).unwrap();
        conn.execute("COMMIT", []).unwrap();
        let _ = t0;
    }
    println!("raw empty txn {:?}/op", t.elapsed() / 5000);
}
#[allow(dead_code)]
fn _unused() {}
