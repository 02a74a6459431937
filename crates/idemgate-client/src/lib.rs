//! A client of idemgate's key service (`idemgate key-service`): services in any language
//! call it before and after their business operation; this crate is the Rust side.
//!
//! # Layout
//! - [`KeyServiceClient`]: typed calls of the public API (`/v1/acquire`, `/v1/renew`,
//!   `/v1/complete`, `/v1/fail`, `/v1/release`, `/v1/records`); the bodies are in [`wire`].
//! - [`KeyServiceStore`]: the [`idemgate_core::IdempotencyStore`] primitives over
//!   `/v1/store/...` (bodies in [`store_wire`]), so the tower layer and the gateway can use
//!   `store = "idemgate://host:port"` and keep deciding with their own per-route policy.
//!
//! # The calls of one operation
//! ```text
//! acquire ──▶ run ──▶ (business operation, renew while it lasts) ──▶ complete | fail | release
//!        ├──▶ replay            (answer with the stored response)
//!        ├──▶ in_flight         (wait retry_after_ms, acquire again)
//!        └──▶ mismatch | previous_failed | outcome_unknown | not_kept   (do not run)
//! ```

/// Declares wire bodies: each type derives `Clone`, `Debug`, `PartialEq`, `Eq` and serde's
/// `Serialize` and `Deserialize` and, with the `openapi` feature, `utoipa::ToSchema`, besides
/// the derives and attributes written on it.
macro_rules! wire_types {
    ($($(#[$attr:meta])* pub $kind:ident $name:ident $body:tt)*) => {$(
        #[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        $(#[$attr])*
        pub $kind $name $body
    )*};
}

mod client;
mod store;
pub mod store_wire;
pub mod wire;

pub use client::{ClientError, KeyServiceClient, DEFAULT_TIMEOUT};
pub use store::KeyServiceStore;
