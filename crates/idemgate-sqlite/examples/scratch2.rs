#![allow(missing_docs, clippy::disallowed_types)]
use std::time::{Duration, Instant};

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.db");
    drop(idemgate_sqlite::SqliteStore::open(&path, Default::default()).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("PRAGMA synchronous=NORMAL").unwrap();
    match mode.as_str() {
        "off" => conn.execute_batch("PRAGMA wal_autocheckpoint=0").unwrap(),
        "big" => conn.execute_batch("PRAGMA wal_autocheckpoint=8192").unwrap(),
        "cache" => conn.execute_batch("PRAGMA wal_autocheckpoint=8192; PRAGMA cache_size=-32768").unwrap(),
        _ => {}
    }
    let n = 20000;
    let (mut t_begin, mut t_sel, mut t_ins, mut t_commit, mut t_upd) = (Duration::ZERO, Duration::ZERO, Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let body = vec![7u8; 256];
    let all = Instant::now();
    for _ in 0..n {
        let k = format!("key-{:016x}", rand::random::<u64>());
        let t = Instant::now();
        conn.prepare_cached("BEGIN IMMEDIATE").unwrap().execute([]).unwrap();
        let t1 = Instant::now();
        let _ = conn.prepare_cached("SELECT fence FROM idempotency_records WHERE principal=?1 AND route=?2 AND key=?3").unwrap().query_row(("bench", "POST /payments", &k), |r| r.get::<_, i64>(0));
        let t2 = Instant::now();
        conn.prepare_cached("INSERT INTO idempotency_records (principal, route, key, fingerprint, fingerprint_version, state, fence, lease_token, lease_expires_at, created_at, expires_at) VALUES (?1, ?2, ?3, ?4, 1, 'in_progress', 1, 5, 5, 5, 99999999999999)").unwrap().execute(("bench", "POST /payments", &k, &[1u8; 32][..])).unwrap();
        let t3 = Instant::now();
        conn.prepare_cached("COMMIT").unwrap().execute([]).unwrap();
        let t4 = Instant::now();
        conn.prepare_cached("UPDATE idempotency_records SET state='completed', response_body=?4, response_headers=?4, status=201, replayable=1, lease_token=NULL WHERE principal=?1 AND route=?2 AND key=?3").unwrap().execute(("bench", "POST /payments", &k, &body)).unwrap();
        let t5 = Instant::now();
        t_begin += t1 - t; t_sel += t2 - t1; t_ins += t3 - t2; t_commit += t4 - t3; t_upd += t5 - t4;
    }
    println!("{mode}: total {:?}/pair; begin {:?} select {:?} insert {:?} commit {:?} update {:?}", all.elapsed() / n, t_begin / n, t_sel / n, t_ins / n, t_commit / n, t_upd / n);
}
