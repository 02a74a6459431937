//! The idemgate contract as a tower middleware: `Idempotency-Key` enforcement in front of
//! any HTTP service. The gateway (`idemgate serve`) is this layer around a reverse proxy;
//! Rust services can use it directly.
//!
//! See [`IdempotencyLayer`] for an example and [`Idempotency`] for what happens to each
//! request, and `docs/errors.md` for every answer the layer gives itself.

pub mod access;
mod admission;
pub mod body;
mod execute;
mod fingerprint;
pub mod headers;
pub mod jwt;
mod layer;
mod lease;
pub mod limits;
pub mod metrics;
pub mod openapi;
pub mod policy;
pub mod rejection;
mod service;
mod template;

pub use admission::{authorization_principal, principal_from_authorization};
pub use jwt::{JwtVerifier, TokenError};
pub use layer::IdempotencyLayer;
pub use lease::{LeaseHandle, NotSent};
pub use policy::{parse_method, Policy, PrincipalSource, RoutePolicy, StatusAction, StatusPattern};
pub use rejection::{IdempotencyRejection, LimitKind};
pub use service::Idempotency;
