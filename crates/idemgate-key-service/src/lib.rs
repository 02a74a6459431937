//! idemgate's key service: an HTTP/JSON API that services in any language call before and
//! after their business operation (acquire → run → complete / fail / release, renewing the
//! lease meanwhile), with per-service bearer tokens bound to namespaces. `idemgate
//! key-service` serves it; this crate is the router, usable on any store.
//!
//! # Layout
//! - [`KeyServiceConfig`]: the `[key_service]` section; [`auth`]: clients, tokens,
//!   namespaces.
//! - [`api`]: `/v1/acquire` (drives the core [`Lifecycle`]); [`outcome`]: `/v1/renew`,
//!   `/v1/complete`, `/v1/fail`, `/v1/release`; [`records`]: `GET /v1/records`;
//!   [`store_api`]: `/v1/store/...` for [`idemgate_client::KeyServiceStore`]; [`events`]:
//!   `POST /v1/wait` and `POST /v1/store/announce`, key events between callers;
//!   [`openapi`]: `/v1/openapi.json`; [`problem`]: errors as problem details.
//! - [`counters`]: the counters on `/metrics`, every series registered at 0 at start-up.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::sync::Arc;
//! use idemgate_core::{Lifecycle, MemoryStore};
//! use idemgate_key_service::{KeyService, KeyServiceConfig};
//!
//! let lifecycle = Lifecycle::new(Arc::new(MemoryStore::new()), Default::default());
//! let settings = KeyServiceConfig::default().validate().unwrap();
//! let app = idemgate_key_service::router(KeyService::new(lifecycle, &settings));
//! # let _ = app; });
//! ```

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use idemgate_core::{IdempotencyStore, Lifecycle};
use serde::{Deserialize, Serialize};

pub mod api;
pub mod auth;
pub mod counters;
pub mod events;
mod fingerprint;
pub mod openapi;
pub mod outcome;
pub mod problem;
pub mod records;
pub mod store_api;
pub mod validate;

pub use auth::{Caller, ClientConfig, Clients};
use problem::ApiError;

/// The `[key_service]` section of the configuration file.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct KeyServiceConfig {
    /// Address of the API listener. Default `127.0.0.1:8081`.
    pub listen: String,
    /// Address of the admin listener (`/healthz`, `/readyz`, `/metrics`); empty disables
    /// it. Default `127.0.0.1:9091`.
    pub admin_listen: String,
    /// Largest request body, in bytes (a stored response arrives base64-encoded, 4/3 of its
    /// size). Default 2097152 (2 MiB).
    pub max_request_bytes: usize,
    /// The calling services.
    pub clients: Vec<ClientConfig>,
}

impl Default for KeyServiceConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8081".into(),
            admin_listen: "127.0.0.1:9091".into(),
            max_request_bytes: 2 << 20,
            clients: Vec::new(),
        }
    }
}

/// A `[key_service]` section that passed [`KeyServiceConfig::validate`].
#[derive(Clone, Debug)]
pub struct KeyServiceSettings {
    /// API listener.
    pub listen: SocketAddr,
    /// Admin listener, if enabled.
    pub admin_listen: Option<SocketAddr>,
    /// Largest request body, in bytes.
    pub max_request_bytes: usize,
    /// The clients.
    pub clients: Clients,
}

impl KeyServiceConfig {
    /// Checks every value.
    ///
    /// # Errors
    /// Every problem, each naming its field (`key_service.clients[0].token_sha256: ...`).
    pub fn validate(&self) -> Result<KeyServiceSettings, Vec<String>> {
        let mut errs = Vec::new();
        let addr = |field: &str, v: &str, errs: &mut Vec<String>| {
            v.trim()
                .parse::<SocketAddr>()
                .map_err(|_| errs.push(format!("key_service.{field}: `{v}` is not host:port")))
                .ok()
        };
        let listen = addr("listen", &self.listen, &mut errs);
        let admin_listen = match self.admin_listen.trim() {
            "" => None,
            v => addr("admin_listen", v, &mut errs),
        };
        if listen.is_some_and(|a| a.port() != 0) && listen == admin_listen {
            errs.push("key_service.admin_listen: same as key_service.listen".into());
        }
        if !(1024..=(256 << 20)).contains(&self.max_request_bytes) {
            errs.push("key_service.max_request_bytes: must be between 1024 and 268435456".into());
        }
        let clients = Clients::from_config(&self.clients, &mut errs);
        match listen {
            Some(listen) if errs.is_empty() => Ok(KeyServiceSettings {
                listen,
                admin_listen,
                max_request_bytes: self.max_request_bytes,
                clients,
            }),
            _ => Err(errs),
        }
    }
}

/// The service's state: the lifecycle over the store, and the clients.
#[derive(Debug)]
pub struct KeyService<St> {
    lifecycle: Lifecycle<St>,
    clients: Clients,
    max_request_bytes: usize,
    events: events::EventHub,
}

impl<St: IdempotencyStore> KeyService<St> {
    /// A service over `lifecycle` with the settings' clients and limits. Registers every
    /// counter series it can emit at 0 with the installed recorder ([`counters::register`]).
    pub fn new(lifecycle: Lifecycle<St>, settings: &KeyServiceSettings) -> Arc<Self> {
        if settings.clients.is_empty() {
            tracing::warn!(
                "key service: no [[key_service.clients]] configured; every call gets 401"
            );
        }
        counters::register(settings, lifecycle.store().backend());
        Arc::new(Self {
            lifecycle,
            clients: settings.clients.clone(),
            max_request_bytes: settings.max_request_bytes,
            events: events::EventHub::default(),
        })
    }

    /// The lifecycle (and through it the store).
    pub fn lifecycle(&self) -> &Lifecycle<St> {
        &self.lifecycle
    }

    /// For a process that stops: `/v1/acquire` calls waiting with `wait_ms` answer
    /// `in_flight`, and `/v1/wait` calls answer, at once (the drain does not wait for them),
    /// and no waiter starts a run.
    pub fn end_waits(&self) {
        self.lifecycle.end_waits();
        self.events.close();
    }
}

impl<St> auth::HasClients for Arc<KeyService<St>> {
    fn clients(&self) -> &Clients {
        &self.clients
    }
}

/// The API's router: `/v1/...`, with problem+json for unknown paths and methods.
pub fn router<St: IdempotencyStore>(service: Arc<KeyService<St>>) -> Router {
    use store_api as store;
    let limit = service.max_request_bytes;
    Router::new()
        .route("/v1/acquire", post(api::acquire::<St>))
        .route("/v1/renew", post(outcome::renew::<St>))
        .route("/v1/complete", post(outcome::complete::<St>))
        .route("/v1/fail", post(outcome::fail::<St>))
        .route("/v1/release", post(outcome::release::<St>))
        .route("/v1/records", get(records::records::<St>))
        .route("/v1/wait", post(events::wait::<St>))
        .route("/v1/store/announce", post(events::announce::<St>))
        .route("/v1/store/insert_or_get", post(store::insert_or_get::<St>))
        .route("/v1/store/take_over", post(store::take_over::<St>))
        .route("/v1/store/renew", post(store::renew::<St>))
        .route("/v1/store/complete", post(store::complete::<St>))
        .route("/v1/store/fail", post(store::fail::<St>))
        .route("/v1/store/release", post(store::release::<St>))
        .route("/v1/store/get", post(store::get::<St>))
        .route("/v1/store/purge", post(store::purge::<St>))
        .route("/v1/store/ping", get(store::ping::<St>))
        .route(
            "/v1/openapi.json",
            get(|| async { Json(openapi::document()) }),
        )
        .method_not_allowed_fallback(|| async { not_allowed() })
        .fallback(|| async { not_found() })
        .with_state(service)
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn(observe))
}

fn not_found() -> Response {
    ApiError::invalid("path", "no such endpoint (see /v1/openapi.json)")
        .with_status(http::StatusCode::NOT_FOUND)
        .into_response()
}

fn not_allowed() -> Response {
    ApiError::invalid(
        "method",
        "this endpoint does not take this method (see /v1/openapi.json)",
    )
    .with_status(http::StatusCode::METHOD_NOT_ALLOWED)
    .into_response()
}

/// Counts every answer (`idempotency_key_service_requests_total{endpoint,status}`) and its
/// duration (`idempotency_key_service_request_duration_seconds{endpoint}`).
async fn observe(req: Request, next: Next) -> Response {
    let endpoint = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "other".to_owned(), |p| p.as_str().to_owned());
    let started = tokio::time::Instant::now();
    let resp = next.run(req).await;
    let status = resp.status().as_u16().to_string();
    metrics::counter!("idempotency_key_service_requests_total", "endpoint" => endpoint.clone(), "status" => status).increment(1);
    metrics::histogram!("idempotency_key_service_request_duration_seconds", "endpoint" => endpoint)
        .record(started.elapsed().as_secs_f64());
    resp
}
