//! The rows about stored records: a lapsed lease, a corrupt record, an expired key, and a
//! store that cannot answer.

use std::time::Duration;

use idemgate::core::{InsertOutcome, InsertRequest, LeaseToken};
use idemgate::IdempotencyStore;
use reqwest::StatusCode;

use crate::app::App;
use crate::rows::{post, problem, replayed, scope, Damage};

pub(crate) async fn lapsed_corrupt_and_expired<St: IdempotencyStore>(
    app: &App<St>,
    damage: Damage<St>,
) {
    // A holder that died after forwarding (its lease lapsed): outcome unknown, not run.
    let done = scope("alice", "POST /payments", "pay-key-00000001");
    let fingerprint = app.store.get(&done).await.unwrap().unwrap().fingerprint;
    let lapsed = InsertRequest {
        key: scope("alice", "POST /payments", "lapsed-key-00001"),
        fingerprint,
        token: LeaseToken::random(),
        lease_ttl: Duration::from_millis(100),
        record_ttl: Duration::from_secs(3600),
    };
    let inserted = app.store.insert_or_get(&lapsed).await.unwrap();
    assert!(matches!(inserted, InsertOutcome::Inserted(_)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = app.effects.get("payments");
    let resp = post(
        app,
        "/payments",
        Some("alice"),
        Some("lapsed-key-00001"),
        r#"{"amount":1}"#,
    );
    assert_eq!(
        problem(resp.await).await,
        (StatusCode::INTERNAL_SERVER_ERROR, "outcome-unknown".into())
    );
    // A stored record that fails its checksum: never replayed.
    damage(&app.store, &done).await;
    let resp = post(
        app,
        "/payments",
        Some("alice"),
        Some("pay-key-00000001"),
        r#"{"amount":1}"#,
    );
    assert_eq!(
        problem(resp.await).await,
        (StatusCode::INTERNAL_SERVER_ERROR, "record-corrupt".into())
    );
    assert_eq!(app.effects.get("payments"), before, "neither ran");
    // A key past its TTL is new.
    let key = Some("ttl-key-00000001");
    assert_eq!(
        post(app, "/short-ttl", Some("alice"), key, "{}")
            .await
            .status(),
        201
    );
    assert!(replayed(
        &post(app, "/short-ttl", Some("alice"), key, "{}").await
    ));
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let again = post(app, "/short-ttl", Some("alice"), key, "{}").await;
    assert_eq!(again.status(), 201);
    assert!(!replayed(&again));
    assert_eq!(app.effects.get("short-ttl"), 2);
}

/// The store cannot answer in time (another process holds SQLite's write lock past the
/// store deadline): `503` with `Retry-After`, nothing forwarded; once it can, the same key
/// runs, once.
pub(crate) async fn store_unavailable<St>(app: &App<St>, db: &std::path::Path) {
    let raw = rusqlite::Connection::open(db).unwrap();
    raw.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let key = Some("store-down-key01");
    let before = app.effects.get("payments");
    let down = post(app, "/payments", Some("alice"), key, "{}").await;
    assert!(down.headers().get("retry-after").is_some());
    let (s, a) = problem(down).await;
    assert_eq!((s.as_u16(), a.as_str()), (503, "store-unavailable"));
    assert_eq!(
        app.effects.get("payments"),
        before,
        "never forwarded unrecorded"
    );
    raw.execute_batch("COMMIT").unwrap();
    drop(raw);
    // The insert that timed out may land late; the lifecycle then releases it with its own
    // lease (a `409` until then), so the key is never left to read as outcome-unknown.
    let mut up = post(app, "/payments", Some("alice"), key, "{}").await;
    for _ in 0..100 {
        if up.status() != StatusCode::CONFLICT {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        up = post(app, "/payments", Some("alice"), key, "{}").await;
    }
    assert_eq!(up.status(), 201);
    assert!(replayed(
        &post(app, "/payments", Some("alice"), key, "{}").await
    ));
    assert_eq!(app.effects.get("payments"), before + 1);
}
