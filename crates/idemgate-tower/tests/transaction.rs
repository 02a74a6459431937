//! `LeaseHandle::complete_in` on a real PostgreSQL: what it stores, and what it refuses.
#![cfg(feature = "postgres")]

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use http::Request;
use idemgate_core::MemoryStore;
use idemgate_postgres::PostgresStore;
use idemgate_tower::{CompleteError, IdempotencyLayer, LeaseHandle, Policy, RoutePolicy};
use tower::ServiceExt;

async fn handler(
    axum::extract::State(store): axum::extract::State<Arc<PostgresStore>>,
    lease: LeaseHandle,
    body: String,
) -> Result<Response, (StatusCode, String)> {
    let fail = |e: &dyn std::fmt::Display| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
    let mut tx = store.pool().begin().await.map_err(|e| fail(&e))?;
    let (status, size) = match body.as_str() {
        "big" => (StatusCode::CREATED, 2048),
        "broke" => (StatusCode::INTERNAL_SERVER_ERROR, 1),
        _ => (StatusCode::CREATED, 10),
    };
    let reply = (
        status,
        [("set-cookie", "s=1"), ("x-kept", "yes")],
        "x".repeat(size),
    );
    match lease.complete_in(&mut tx, reply).await {
        Ok(resp) => {
            tx.commit().await.map_err(|e| fail(&e))?;
            Ok(resp)
        }
        Err(CompleteError::NotStored(s)) => {
            Ok((StatusCode::BAD_GATEWAY, s.to_string()).into_response())
        }
        Err(e) => Err(fail(&e)),
    }
}

fn request(key: &str, body: &'static str) -> Request<axum::body::Body> {
    Request::post("/pay")
        .header("idempotency-key", key)
        .header("authorization", "Bearer alice")
        .body(body.into())
        .unwrap()
}

async fn text(resp: Response) -> String {
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn completion_in_the_transaction_keeps_what_the_layer_keeps() {
    let Ok(url) = std::env::var("IDEMGATE_TEST_DATABASE_URL") else {
        println!("skipping: IDEMGATE_TEST_DATABASE_URL is not set");
        return;
    };
    let table = format!("idem_tx_{:08x}", rand_suffix());
    let store = PostgresStore::connect(&url)
        .await
        .unwrap()
        .with_table_name(&table)
        .unwrap();
    store.migrate().await.unwrap();
    let store = Arc::new(store);
    let route = RoutePolicy::default().with_max_stored_response_bytes(1024);
    let policy = Policy::default().with_route("POST /pay", route).unwrap();
    let app = Router::new()
        .route("/pay", post(handler))
        .route_layer(IdempotencyLayer::from_arc(store.clone(), policy).with_transactions())
        .with_state(store.clone());

    let first = app
        .clone()
        .oneshot(request("tx-key-00000001", "ok"))
        .await
        .unwrap();
    assert_eq!(
        first.headers()["set-cookie"],
        "s=1",
        "the first client gets it"
    );
    let retry = app
        .clone()
        .oneshot(request("tx-key-00000001", "ok"))
        .await
        .unwrap();
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert!(
        retry.headers().get("set-cookie").is_none(),
        "the layer's header filter"
    );
    assert_eq!(retry.headers()["x-kept"], "yes");
    assert_eq!(text(retry).await, "x".repeat(10));

    // Over the route's cap: delivered whole, completed as not replayable.
    let big = app
        .clone()
        .oneshot(request("tx-key-00000002", "big"))
        .await
        .unwrap();
    assert_eq!(text(big).await.len(), 2048);
    let again = app
        .clone()
        .oneshot(request("tx-key-00000002", "big"))
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::GONE);

    // A status the route does not store is refused: nothing written, the layer records it.
    let broke = app
        .clone()
        .oneshot(request("tx-key-00000003", "broke"))
        .await
        .unwrap();
    assert_eq!(
        (broke.status(), text(broke).await),
        (StatusCode::BAD_GATEWAY, "500".into())
    );

    for t in [
        table.clone(),
        format!("{table}_migrations"),
        format!("{table}_failovers"),
    ] {
        let _ = sqlx::query(&format!("DROP TABLE IF EXISTS {t}"))
            .execute(store.pool())
            .await;
    }
}

#[tokio::test]
async fn a_layer_on_another_store_cannot_complete_in_a_transaction() {
    let Ok(url) = std::env::var("IDEMGATE_TEST_DATABASE_URL") else {
        println!("skipping: IDEMGATE_TEST_DATABASE_URL is not set");
        return;
    };
    let pg = Arc::new(PostgresStore::connect(&url).await.unwrap());
    let app = Router::new()
        .route("/pay", post(handler))
        .route_layer(IdempotencyLayer::new(MemoryStore::new(), Policy::default()))
        .with_state(pg);
    let resp = app.oneshot(request("tx-key-00000004", "ok")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(text(resp).await.contains("not PostgreSQL"));
}

fn rand_suffix() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    t.subsec_nanos() ^ std::process::id()
}
