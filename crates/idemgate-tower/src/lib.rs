//! The idemgate contract as a tower middleware: `Idempotency-Key` enforcement in front of
//! any HTTP service. The gateway (`idemgate serve`) is this layer around a reverse proxy;
//! Rust services can use it directly.
//!
//! See [`IdempotencyLayer`] for an example and [`Idempotency`] for what happens to each
//! request, and `docs/errors.md` for every answer the layer gives itself.

pub mod body;
pub mod headers;
mod layer;
pub mod policy;
pub mod rejection;
mod service;

pub use layer::IdempotencyLayer;
pub use policy::{parse_method, Policy, PrincipalSource, RoutePolicy, StatusAction, StatusPattern};
pub use rejection::IdempotencyRejection;
pub use service::{Idempotency, LeaseHandle, NotSent};
