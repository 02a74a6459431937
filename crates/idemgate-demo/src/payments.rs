//! The example payments API behind `idemgate demo` and `idemgate demo-api`: it charges a
//! ledger on every `POST /payments`, with no idempotency of its own, so a duplicate charge
//! is visible in `GET /ledger`.
//!
//! - `POST /payments` with `{"amount": 1000, "currency": "EUR"}` → `201` with the charge,
//!   `Location`, `ETag` and a `Set-Cookie`. `?delay_ms=N` makes the charge take N ms. A charge
//!   runs to the end even if the client disconnects, like a real payment processor. A body
//!   with `"fail_status": 500` (any `5xx`) is answered with that status and charges nothing
//!   (a processor that fails on request: for `idemgate probe --failing-body-file`).
//! - `GET /payments/{id}` → the charge; `GET /ledger` → `{"charges": n, "total": sum}`.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

/// One charge.
#[derive(Debug, Clone, Serialize)]
pub struct Charge {
    /// `pay_N`.
    pub id: String,
    /// Amount in minor units (cents).
    pub amount: u64,
    /// ISO 4217 code.
    pub currency: String,
}

/// The ledger of charges.
#[derive(Debug, Default)]
pub struct Ledger {
    charges: Mutex<Vec<Charge>>,
}

impl Ledger {
    /// Number of charges made.
    pub fn count(&self) -> usize {
        self.charges.lock().map(|c| c.len()).unwrap_or(0)
    }
}

#[derive(Debug, Deserialize)]
struct NewPayment {
    amount: u64,
    currency: String,
    /// A `5xx` to answer instead of charging.
    #[serde(default)]
    fail_status: Option<u16>,
}

#[derive(Debug, Deserialize)]
struct Delay {
    delay_ms: Option<u64>,
}

/// The API's routes over `ledger`.
pub fn router(ledger: Arc<Ledger>) -> Router {
    Router::new()
        .route("/payments", post(create))
        .route("/payments/{id}", get(show))
        .route("/ledger", get(ledger_summary))
        .with_state(ledger)
}

async fn create(
    State(ledger): State<Arc<Ledger>>,
    delay: Result<Query<Delay>, axum::extract::rejection::QueryRejection>,
    body: Result<Json<NewPayment>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let (Ok(Query(delay)), Ok(Json(p))) = (delay, body) else {
        return (
            StatusCode::BAD_REQUEST,
            Json(serde_json::json!({"error": "expected {\"amount\": <cents>, \"currency\": \"EUR\"}, and ?delay_ms=<ms> if any"})),
        )
            .into_response();
    };
    if let Some(status) = p.fail_status.and_then(|s| StatusCode::from_u16(s).ok()) {
        if status.is_server_error() {
            let error = serde_json::json!({"error": "failed on request (fail_status)"});
            return (status, Json(error)).into_response();
        }
    }
    // The charge runs in its own task: a client that hangs up does not undo it.
    let work = tokio::spawn(async move {
        if let Some(ms) = delay.delay_ms {
            tokio::time::sleep(Duration::from_millis(ms.min(60_000))).await;
        }
        let mut charges = ledger.charges.lock().unwrap_or_else(|e| e.into_inner());
        let charge = Charge {
            id: format!("pay_{}", charges.len() + 1),
            amount: p.amount,
            currency: p.currency,
        };
        charges.push(charge.clone());
        charge
    });
    let Ok(charge) = work.await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    (
        StatusCode::CREATED,
        [
            (header::LOCATION, format!("/payments/{}", charge.id)),
            (header::ETAG, format!("\"{}-v1\"", charge.id)),
            (header::SET_COOKIE, format!("last_payment={}; HttpOnly", charge.id)),
        ],
        Json(serde_json::json!({
            "id": charge.id, "amount": charge.amount, "currency": charge.currency, "status": "succeeded"
        })),
    )
        .into_response()
}

async fn show(State(ledger): State<Arc<Ledger>>, Path(id): Path<String>) -> Response {
    let charges = ledger.charges.lock().unwrap_or_else(|e| e.into_inner());
    match charges.iter().find(|c| c.id == id) {
        Some(c) => Json(c.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn ledger_summary(State(ledger): State<Arc<Ledger>>) -> Response {
    let charges = ledger.charges.lock().unwrap_or_else(|e| e.into_inner());
    let total: u64 = charges.iter().map(|c| c.amount).sum();
    Json(serde_json::json!({"charges": charges.len(), "total": total})).into_response()
}

/// Serves the API on `listener` until `shutdown`.
///
/// # Errors
/// When the listener fails.
pub async fn serve(
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    axum::serve(listener, router(Arc::default()))
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}

/// Starts the API on a free loopback port; returns its base URL and ledger.
///
/// # Errors
/// When no port can be bound.
pub async fn spawn() -> anyhow::Result<(String, Arc<Ledger>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let ledger = Arc::new(Ledger::default());
    let app = router(ledger.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((base, ledger))
}
