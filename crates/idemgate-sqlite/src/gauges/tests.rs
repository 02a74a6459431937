use super::*;
use crate::schema;

/// A migrated database with the runs of `rows` (state, count) written at rowids in order:
/// the first `stuck` of each `in_progress` run have a lapsed lease, the first `expired` of
/// each other run are past their expiry.
fn seeded(rows: &[(&str, i64)], stuck: i64, expired: i64) -> Connection {
    let mut conn = Connection::open_in_memory().unwrap();
    schema::migrate(&mut conn).unwrap();
    let now = now_millis();
    let tx = conn.transaction().unwrap();
    let mut i = 0_i64;
    for &(state, n) in rows {
        for j in 0..n {
            i += 1;
            let running = state == "in_progress";
            let lease = running.then_some(if j < stuck { now - 1 } else { now + 60_000 });
            let expires = if !running && j < expired {
                now - 1
            } else {
                now + 86_400_000
            };
            tx.execute(
                "INSERT INTO idempotency_records (principal, route, key, fingerprint,
                 fingerprint_version, state, fence, lease_token, lease_expires_at, status,
                 response_body, created_at, expires_at)
                 VALUES ('p', 'r', ?1, x'00', 1, ?2, 1, 7, ?3, 201, x'0102', ?4, ?5)",
                params![format!("k{i}"), state, lease, now - 1_000_000 + i, expires],
            )
            .unwrap();
        }
    }
    tx.commit().unwrap();
    conn
}

const ROWS: &[(&str, i64)] = &[
    ("completed", 5000),
    ("in_progress", 40),
    ("failed", 7),
    ("completed", 3000),
];

#[test]
fn a_large_table_counts_the_unsettled_exactly_and_the_rest_by_sample() {
    let conn = seeded(ROWS, 3, 100);
    let exact = gauges(&conn, i64::MAX).unwrap();
    assert!(!exact.approximate);
    assert_eq!(
        (exact.completed, exact.in_progress, exact.failed),
        (8000, 40, 7)
    );
    assert_eq!(exact.stuck_in_progress, 3);
    assert_eq!(
        exact.expired,
        Some(207),
        "100 of each completed run, 7 failed"
    );
    assert_eq!(exact.body_bytes, Some(2 * 8047));

    let sampled = gauges(&conn, 1000).unwrap();
    assert!(sampled.approximate);
    assert_eq!((sampled.in_progress, sampled.failed), (40, 7));
    assert_eq!(sampled.stuck_in_progress, 3);
    assert_eq!(
        sampled.completed, 8000,
        "packed rowids: the sample is exact"
    );
    assert_eq!(sampled.expired, exact.expired);
    assert_eq!(sampled.oldest_created_at, exact.oldest_created_at);
    assert_eq!(sampled.body_bytes, None, "not summed on a large table");
}

#[test]
fn the_sample_follows_rows_deleted_in_the_middle() {
    let conn = seeded(&[("completed", 100_000)], 0, 0);
    conn.execute("DELETE FROM idempotency_records WHERE rowid % 4 = 0", [])
        .unwrap();
    let g = gauges(&conn, 1000).unwrap();
    assert!(g.approximate);
    let off = (g.completed as f64 - 75_000.0).abs() / 75_000.0;
    assert!(off < 0.02, "estimated {} of 75,000", g.completed);
}

#[test]
fn the_unsettled_are_read_through_their_index() {
    let conn = seeded(&[("completed", 10)], 0, 0);
    let plan: Vec<String> = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {UNSETTLED}"))
        .unwrap()
        .query_map([0], |r| r.get(3))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert!(
        plan.iter()
            .any(|s| s.contains("idempotency_records_unsettled")),
        "{plan:?}"
    );
}

#[test]
fn an_empty_table_has_no_records_either_way() {
    let conn = seeded(&[], 0, 0);
    for exact_below in [0, i64::MAX] {
        let g = gauges(&conn, exact_below).unwrap();
        assert_eq!(g.records(), 0);
        assert_eq!(g.oldest_created_at, None);
    }
}

#[tokio::test]
async fn durability_says_which_crash_loses_commits() {
    use idemgate_core::{DurabilityLevel, GaugedStore};

    use crate::{SqliteOptions, SqliteStore, Synchronous};

    let dir = tempfile::tempdir().unwrap();
    let normal = SqliteStore::open(dir.path().join("n.db"), SqliteOptions::default()).unwrap();
    let d = normal.durability().await.unwrap();
    assert_eq!(d.level, DurabilityLevel::Local);
    assert!(d.summary.contains("power loss"), "{}", d.summary);
    assert!(d.facts.contains(&("synchronous".into(), "normal".into())));
    let full = SqliteOptions::default().with_synchronous(Synchronous::Full);
    let full = SqliteStore::open(dir.path().join("f.db"), full).unwrap();
    let d = full.durability().await.unwrap();
    assert_eq!(
        (d.level, d.refusing_new_keys),
        (DurabilityLevel::Local, None)
    );
    assert!(d.facts.contains(&("synchronous".into(), "full".into())));
    let memory = SqliteStore::open_in_memory().unwrap();
    assert_eq!(
        memory.durability().await.unwrap().level,
        DurabilityLevel::Volatile
    );
}
