//! A plain hyper server with a tower service (no axum) made idempotent: the layer wraps a
//! `service_fn`, and the caller comes from a closure that looks the `X-Api-Key` up.
//!
//! ```text
//! cargo run -p tower-hyper
//! curl -si localhost:3003/orders -H 'X-Api-Key: key-alice' \
//!      -H 'Idempotency-Key: 9c1d7e0a-tower-hyper' -d '{"sku": "A-1"}'
//! ```
//!
//! Settings (environment): `LISTEN` (default `127.0.0.1:3003`). Records go to
//! `idempotency.db` in the working directory. `GET /orders/count` says how many orders ran.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use idemgate::body::{full, BoxBody};
use idemgate::{IdempotencyLayer, Policy, PrincipalSource, SqliteStore};
use tower::{service_fn, Layer};

/// Orders run so far (the side effect that must happen once per key).
static RAN: AtomicU64 = AtomicU64::new(0);

/// The owner of an API key (a demo table; a real service asks its key store).
fn owner(api_key: &str) -> Option<&'static str> {
    match api_key {
        "key-alice" => Some("alice"),
        "key-bob" => Some("bob"),
        _ => None,
    }
}

/// The service: `POST /orders` runs an order, `GET /orders/count` counts them.
async fn orders(req: Request<BoxBody>) -> Result<Response<BoxBody>, Infallible> {
    let reply = |status: StatusCode, body: String| {
        let mut resp = Response::new(full(Bytes::from(body)));
        *resp.status_mut() = status;
        Ok(resp)
    };
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/orders/count") => {
            reply(StatusCode::OK, RAN.load(Ordering::SeqCst).to_string())
        }
        (&Method::POST, "/orders") => {
            let who = req
                .headers()
                .get("x-api-key")
                .and_then(|v| v.to_str().ok())
                .and_then(owner);
            let Some(who) = who else {
                return reply(StatusCode::UNAUTHORIZED, "unknown API key".into());
            };
            let body = req
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let id = RAN.fetch_add(1, Ordering::SeqCst) + 1;
            let order = format!(r#"{{"id":{id},"owner":"{who}","bytes":{}}}"#, body.len());
            reply(StatusCode::CREATED, order)
        }
        _ => reply(StatusCode::NOT_FOUND, String::new()),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let store = SqliteStore::open("idempotency.db", Default::default())?;
    // The caller is the API key's owner: an unknown key names no caller (`401`).
    let principal = PrincipalSource::from_fn(|parts| {
        let key = parts.headers.get("x-api-key")?.to_str().ok()?;
        owner(key).map(str::to_owned)
    });
    let policy = Policy::default()
        .with_principal(principal)
        .with_route("POST /orders", Default::default())?;
    let idempotency = IdempotencyLayer::new(store, policy);
    let service = idempotency.layer(service_fn(orders));

    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3003".into());
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("orders service on http://{}", listener.local_addr()?);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        let (tcp, _) = tokio::select! {
            accepted = listener.accept() => accepted?,
            _ = &mut ctrl_c => break,
        };
        let service = TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            let conn = Builder::new(TokioExecutor::new());
            let _ = conn.serve_connection(TokioIo::new(tcp), service).await;
        });
    }
    // Operations whose clients left still run: let them record their outcome.
    let _ = tokio::time::timeout(Duration::from_secs(30), idempotency.drain()).await;
    Ok(())
}
