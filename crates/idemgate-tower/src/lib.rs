//! The idemgate contract as a tower middleware: `Idempotency-Key` enforcement in front of
//! any HTTP service, so a retried `POST` runs once and every retry gets the stored response.
//! The gateway (`idemgate serve`) is this layer around a reverse proxy; Rust services use it
//! directly, most easily through the `idemgate` facade crate.
//!
//! ```
//! use std::convert::Infallible;
//!
//! use http::{Request, Response};
//! use idemgate_core::MemoryStore;
//! use idemgate_tower::body::{full, BoxBody};
//! use idemgate_tower::{IdempotencyLayer, Policy};
//! use tower::{service_fn, Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let layer = IdempotencyLayer::new(MemoryStore::new(), Policy::default());
//! let svc = layer.layer(service_fn(|_req: Request<BoxBody>| async {
//!     Ok::<_, Infallible>(Response::builder().status(201).body(full("charged".into())).unwrap())
//! }));
//! let req = || Request::post("/payments")
//!     .header("idempotency-key", "4b9f0c52-first")
//!     .header("authorization", "Bearer alice")
//!     .body(full("{}".into())).unwrap();
//! assert_eq!(svc.clone().oneshot(req()).await.unwrap().status(), 201);
//! let retry = svc.oneshot(req()).await.unwrap();
//! assert_eq!(retry.headers()["idempotent-replayed"], "true");
//! # }
//! ```
//!
//! The layout follows tower-http: [`IdempotencyLayer`] makes [`Idempotency`] services,
//! whose calls return a [`ResponseFuture`]. Inside, a covered request goes through
//! admission (key, [`principal`], body, fingerprint), the glue to the core lifecycle
//! ([`idemgate_core::lifecycle`]; the state diagram of a record is drawn once, in the
//! [`idemgate_core`] crate docs), and [`replay`].
//! [`Idempotency`] lists what happens to each request; [`IdempotencyRejection`] is every
//! answer the layer gives itself (`docs/errors.md` explains each to clients).
//!
//! # Features
//! - `axum`: routes come from axum's `MatchedPath` under `Router::route_layer`
//!   ([`Policy::resolve_parts`]), [`IdempotencyRejection`] implements `IntoResponse`, and
//!   [`LeaseHandle`] is an extractor.
//! - `postgres` (implies `axum`): `LeaseHandle::complete_in` completes the key inside the
//!   handler's PostgreSQL transaction, in one call, on a layer built with
//!   `IdempotencyLayer::with_transactions`.
//! - `jwt` (default): [`PrincipalSource::Jwt`], the principal from a verified bearer token
//!   ([`jwt::JwtVerifier`], jsonwebtoken). Without it no verifier can be built.
//! - `limits` (default): per-principal limits ([`limits::PrincipalLimits`]) are enforced;
//!   without it they are not (a warning is logged once).
//! - `metrics` (default): the layer's counters and histograms through the `metrics` facade.
//! - `openapi` (default): `openapi::Contract`, the contract as OpenAPI (built with utoipa's
//!   types), alone, merged into an API description, or added to a utoipa document.
//!
//! The defaults keep every part; `default-features = false` leaves the middleware alone.

mod access;
mod admission;
pub mod body;
#[cfg(feature = "axum")]
mod extract;
mod future;
mod glue;
#[cfg_attr(not(feature = "jwt"), path = "jwt/off.rs")]
pub mod jwt;
mod layer;
mod lease;
pub mod limits;
pub mod metrics;
#[cfg(feature = "openapi")]
pub mod openapi;
pub mod path;
pub mod policy;
pub mod principal;
pub mod rejection;
pub mod replay;
mod service;
mod template;
#[cfg_attr(
    not(all(feature = "axum", feature = "postgres")),
    path = "transaction/off.rs"
)]
mod transaction;

pub use access::TARGET as ACCESS_LOG_TARGET;
pub use future::ResponseFuture;
pub use jwt::JwtVerifier;
pub use layer::IdempotencyLayer;
pub use lease::{LeaseHandle, NotSent, SendFailure};
pub use policy::{Policy, RoutePolicy, StatusAction, StatusPattern};
pub use principal::{
    authorization_hmac, authorization_principal, principal_from_authorization, Principal,
    PrincipalHashKey, PrincipalSource,
};
pub use rejection::{IdempotencyRejection, LimitKind, TokenError};
pub use replay::{
    IDEMPOTENCY_KEY_LIFETIME, IDEMPOTENT_BODY_OMITTED, IDEMPOTENT_REDACTED, IDEMPOTENT_REPLAYED,
    IDEMPOTENT_TAKEOVER,
};
pub use service::Idempotency;
pub use template::parse_method;
#[cfg(all(feature = "axum", feature = "postgres"))]
pub use transaction::CompleteError;
