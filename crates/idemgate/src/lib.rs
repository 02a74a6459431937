//! Idempotency for Rust HTTP services: a client sends `Idempotency-Key`, the first request
//! runs once, its response is stored, and every retry gets the same response without
//! running the operation again. A retried payment is charged once.
//!
//! ```
//! use axum::{extract::Request, middleware::Next, response::Response, routing::post, Router};
//! use idemgate::{IdempotencyLayer, Policy, PrincipalSource, SqliteStore};
//!
//! /// The caller, as the application's auth layer names it.
//! #[derive(Clone, Debug)]
//! struct UserId(String);
//! impl std::fmt::Display for UserId {
//!     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
//!         f.write_str(&self.0)
//!     }
//! }
//!
//! async fn authenticate(mut req: Request, next: Next) -> Response {
//!     req.extensions_mut().insert(UserId("alice".into())); // a real app checks a token
//!     next.run(req).await
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("idempotency.db");
//! let store = SqliteStore::open(path, Default::default())?;
//! let policy = Policy::default().with_principal(PrincipalSource::extension::<UserId>());
//! let app: Router = Router::new()
//!     .route("/payments", post(|| async { "charged once" }))
//!     .route_layer(IdempotencyLayer::new(store, policy))
//!     .layer(axum::middleware::from_fn(authenticate));
//!
//! // A client retries with the same key: the handler ran once, the retry is a replay.
//! use tower::ServiceExt;
//! let pay = || axum::http::Request::post("/payments")
//!     .header("idempotency-key", "8e03978e-40d5-43e8")
//!     .body(axum::body::Body::from("{}"))
//!     .unwrap();
//! let first = app.clone().oneshot(pay()).await?;
//! assert_eq!(first.status(), 200);
//! let retry = app.oneshot(pay()).await?;
//! assert_eq!(retry.headers()["idempotent-replayed"], "true");
//! # Ok(())
//! # }
//! ```
//!
//! Covered requests (`POST` and `PATCH` by default) with an `Idempotency-Key` are scoped by
//! (principal, route, key): the principal comes from the [`PrincipalSource`] you choose
//! (here the `UserId` extension your auth layer sets, so no client-sent header can change
//! it), and the route is the template axum matched (`MatchedPath`), so routes are declared
//! once. A retry gets the stored response with `Idempotent-Replayed: true`; a retry while
//! the first is running gets `409`, the same key with another body `422`, and a store that
//! cannot be reached `503`: never a second execution.
//! [`IdempotencyRejection::catalogue`] lists every answer idemgate gives itself.
//!
//! The state machine of a record (in progress, completed, failed, and a lapsed lease) is
//! drawn once, in the [`core`] crate docs.
//!
//! # Features
//! | feature | default | gives |
//! |---|---|---|
//! | `axum` | yes | the layer with axum integration (implies `tower`) |
//! | `tower` | via `axum` | [`IdempotencyLayer`] for any tower service |
//! | `sqlite` | yes | [`SqliteStore`]: one file, no server |
//! | `postgres` | no | `PostgresStore`, and completion inside the handler's transaction |
//! | `redis` | no | `RedisStore`, standalone or cluster |
//! | `client` | no | `idemgate://` key services in [`AnyStore::from_url`] |
//! | `jwt` | yes | `PrincipalSource::Jwt`: the principal from a verified bearer token |
//! | `limits` | yes | per-principal limits enforced (without it they are not) |
//! | `metrics` | yes | the layer's counters and histograms (the `metrics` facade) |
//! | `openapi` | no | `openapi::Contract`: the contract as OpenAPI |
//!
//! [`MemoryStore`] (tests, one process) is always there.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use idemgate_core as core;
pub use idemgate_core::{
    IdempotencyKey, IdempotencyStore, Lease, LeaseExpiredPolicy, LifecycleConfig, MemoryStore,
    PurgeHandle, StoreError, StoredResponse,
};

#[cfg(feature = "tower")]
pub use idemgate_tower::{
    body, jwt, limits, path, principal, Idempotency, IdempotencyLayer, IdempotencyRejection,
    JwtVerifier, LeaseHandle, NotSent, Policy, Principal, PrincipalSource, ResponseFuture,
    RoutePolicy, StatusPattern, IDEMPOTENT_REPLAYED, IDEMPOTENT_TAKEOVER,
};

#[cfg(feature = "openapi")]
pub use idemgate_tower::openapi;

mod any;
pub use any::{AnyStore, AnyStoreError, AnyUrl};

#[cfg(feature = "sqlite")]
pub use idemgate_sqlite::{SqliteOptions, SqliteStore, SqliteStoreError};

#[cfg(feature = "postgres")]
pub use idemgate_postgres::{PostgresOptions, PostgresStore, PostgresStoreError};

#[cfg(feature = "redis")]
pub use idemgate_redis::{RedisOptions, RedisStore, RedisStoreError};
