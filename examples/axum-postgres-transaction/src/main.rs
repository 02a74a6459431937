//! A payments service on PostgreSQL whose idempotency key completes **in the same
//! transaction** as the payment row: both commit, or neither does.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1/test cargo run -p axum-postgres-transaction
//! curl -si localhost:3001/payments -H 'Authorization: Bearer alice' \
//!      -H 'Idempotency-Key: 1f0c4c3e-6a80-4b7e-9d9b-cc1b8f1f0a11' -d '{"amount": 1000}'
//! ```
//!
//! The `IdempotencyLayer` (on the route, through `route_layer`) acquires the key and hands
//! the handler a [`LeaseHandle`] (an axum extractor). The handler inserts the payment and
//! calls `lease.complete_in(&mut *tx, response)` before committing: one call that stores the
//! response through the layer's header filter (here the `Set-Cookie` is sent to the first
//! client but never stored or replayed) and tells the layer to write nothing more. What
//! happens when things go wrong:
//!
//! - **The transaction rolls back** (an error, or the process dies before `COMMIT`): neither
//!   the payment nor the completion is stored. The key stays `in_progress` under its lease;
//!   retries get `409` until the lease lapses (nobody renews a dead holder's lease), then one
//!   retry takes over and runs the payment, once, because the first never committed. That is
//!   why this route sets `lease_expired = Takeover`: a lapsed lease here means "nothing
//!   happened" (the completion commits with the payment or not at all), not "the outcome is
//!   unknown" as it would for a proxied call.
//! - **The process dies after `COMMIT`**: the key is `completed` with the stored response;
//!   retries get it replayed.
//!
//! Settings (environment): `DATABASE_URL` (required), `LISTEN` (default `127.0.0.1:3001`),
//! `PAYMENTS_TABLE` (default `payments`), `IDEMPOTENCY_TABLE` (default `idempotency_records`),
//! `LEASE_TTL_MS` (default 10000). A request with `X-Pause-Before-Commit-Ms: N` waits N ms
//! between the insert and the commit, so a test can kill the process there; one with
//! `X-Fail-Before-Commit: 1` returns `500` after the completion, before the commit, so the
//! transaction rolls back.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use idemgate::{
    IdempotencyLayer, LeaseExpiredPolicy, LeaseHandle, Policy, PostgresStore, RoutePolicy,
};
use serde::Deserialize;

#[derive(Clone)]
struct App {
    store: Arc<PostgresStore>,
    payments: String,
}

#[derive(Deserialize)]
struct NewPayment {
    amount: i64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_owned());
    let url = std::env::var("DATABASE_URL").map_err(|_| anyhow::anyhow!("set DATABASE_URL"))?;
    let payments = env("PAYMENTS_TABLE", "payments");
    let lease_ms: u64 = env("LEASE_TTL_MS", "10000").parse()?;
    let store = PostgresStore::connect(&url)
        .await?
        .with_table_name(&env("IDEMPOTENCY_TABLE", "idempotency_records"))?;
    store.migrate().await?;
    sqlx::query(&format!(
        "CREATE TABLE IF NOT EXISTS {payments} (id BIGSERIAL PRIMARY KEY, amount BIGINT NOT NULL, \
         idempotency_key TEXT NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now())"
    ))
    .execute(store.pool())
    .await?;
    let store = Arc::new(store);

    let policy = Policy::default().with_route(
        "POST /payments",
        RoutePolicy::default()
            .with_key_required(true)
            .with_lease_ttl(Duration::from_millis(lease_ms))
            // The key completes in the payment's own transaction: a lapsed lease means the
            // transaction never committed, so running again is safe.
            .with_lease_expired(LeaseExpiredPolicy::Takeover),
    )?;
    let idempotency = IdempotencyLayer::from_arc(store.clone(), policy).with_transactions();
    let app = Router::new()
        .route("/payments", post(create_payment))
        .route_layer(idempotency.clone())
        .route("/payments/count", get(count_payments))
        .with_state(App { store, payments });
    let listener = tokio::net::TcpListener::bind(env("LISTEN", "127.0.0.1:3001")).await?;
    println!("payments service on http://{}", listener.local_addr()?);
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await?;
    let _ = tokio::time::timeout(Duration::from_secs(30), idempotency.drain()).await;
    Ok(())
}

async fn create_payment(
    State(app): State<App>,
    lease: LeaseHandle,
    headers: HeaderMap,
    Json(p): Json<NewPayment>,
) -> Result<Response, (StatusCode, String)> {
    let fail = |e: &dyn std::fmt::Display| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
    let mut tx = app.store.pool().begin().await.map_err(|e| fail(&e))?;
    let (id,): (i64,) = sqlx::query_as(&format!(
        "INSERT INTO {} (amount, idempotency_key) VALUES ($1, $2) RETURNING id",
        app.payments
    ))
    .bind(p.amount)
    .bind(lease.lease().key.key.as_str())
    .fetch_one(&mut *tx)
    .await
    .map_err(|e| fail(&e))?;
    if let Some(ms) = headers
        .get("x-pause-before-commit-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
    {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let created = (
        StatusCode::CREATED,
        [
            (header::LOCATION, format!("/payments/{id}")),
            (header::SET_COOKIE, format!("last_payment={id}")),
        ],
        Json(serde_json::json!({"id": id, "amount": p.amount})),
    );
    // The key's completion and the payment commit together.
    let response = lease
        .complete_in(&mut tx, created)
        .await
        .map_err(|e| fail(&e))?;
    if headers.contains_key("x-fail-before-commit") {
        return Err(fail(&"failed before commit")); // `tx` drops: both roll back
    }
    tx.commit().await.map_err(|e| fail(&e))?;
    Ok(response)
}

async fn count_payments(State(app): State<App>) -> Result<String, StatusCode> {
    let (n,): (i64,) = sqlx::query_as(&format!("SELECT count(*) FROM {}", app.payments))
        .fetch_one(app.store.pool())
        .await
        .map_err(|_| StatusCode::SERVICE_UNAVAILABLE)?;
    Ok(n.to_string())
}
