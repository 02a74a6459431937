//! An axum payments service made idempotent in a few lines (the README's "For Rust
//! services"): the caller comes from the `UserId` request extension the auth layer sets,
//! and each route's scope is the template axum matched.
//!
//! ```text
//! cargo run -p axum-sqlite
//! curl -si localhost:3002/accounts/acct-1/payments -H 'Authorization: Bearer alice-token' \
//!      -H 'Idempotency-Key: 1f0c4c3e-6a80-4b7e-9d9b-cc1b8f1f0a11' -d '{"amount": 1000}'
//! ```
//!
//! Settings (environment): `LISTEN` (default `127.0.0.1:3002`). Records go to
//! `idempotency.db` in the working directory. `GET /payments/count` says how many payments
//! ran.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::{Path, Request};
use axum::http::{header::AUTHORIZATION, StatusCode};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
// README:begin
use idemgate::{IdempotencyLayer, Policy, PrincipalSource, SqliteStore};
// README:end
use serde::Deserialize;
use serde_json::{json, Value};

/// The caller, as the auth layer names it.
#[derive(Clone, Debug)]
struct UserId(String);

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The auth layer: a demo token table (a real service verifies a session or a JWT here).
async fn authenticate(mut req: Request, next: Next) -> Result<Response, StatusCode> {
    let token = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let user = match token {
        Some("Bearer alice-token") => "alice",
        Some("Bearer bob-token") => "bob",
        _ => return Err(StatusCode::UNAUTHORIZED),
    };
    req.extensions_mut().insert(UserId(user.to_owned()));
    Ok(next.run(req).await)
}

#[derive(Deserialize)]
struct NewPayment {
    amount: i64,
}

/// Payments run so far (the side effect that must happen once per key).
static RAN: AtomicU64 = AtomicU64::new(0);

async fn create_payment(
    Extension(user): Extension<UserId>,
    Path(account): Path<String>,
    Json(p): Json<NewPayment>,
) -> (StatusCode, Json<Value>) {
    let id = RAN.fetch_add(1, Ordering::SeqCst) + 1;
    let body = json!({"id": id, "user": user.0, "account": account, "amount": p.amount});
    (StatusCode::CREATED, Json(body))
}

async fn count() -> String {
    RAN.load(Ordering::SeqCst).to_string()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // README:begin
    let store = SqliteStore::open("idempotency.db", Default::default())?;
    let policy = Policy::default().with_principal(PrincipalSource::extension::<UserId>());
    let idempotency = IdempotencyLayer::new(store, policy);
    let app = Router::new()
        .route("/accounts/{id}/payments", post(create_payment))
        .route_layer(idempotency.clone())
        .layer(middleware::from_fn(authenticate));
    // README:end
    // Expired records (24 h by default) are deleted every minute while this handle lives.
    let batch = NonZeroU32::new(1000).expect("not zero");
    let _purge = idempotency.spawn_purge(Duration::from_secs(60), batch);
    let app = app.route("/payments/count", get(count));
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3002".into());
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("payments service on http://{}", listener.local_addr()?);
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await?;
    // Operations whose clients left still run: let them record their outcome.
    let _ = tokio::time::timeout(Duration::from_secs(30), idempotency.drain()).await;
    Ok(())
}
