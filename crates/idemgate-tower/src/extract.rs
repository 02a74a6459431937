//! axum integration (feature `axum`): [`LeaseHandle`] as an extractor.

use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use http::request::Parts;

use crate::lease::LeaseHandle;
use crate::rejection::IdempotencyRejection;

/// The lease of a covered request that holds its key. A request without one (sent without
/// an `Idempotency-Key` on a route that does not require it, or a handler outside the
/// layer) is refused with `400` `missing-key`; take `Option<LeaseHandle>` to run such
/// requests unrecorded instead.
impl<S: Send + Sync> FromRequestParts<S> for LeaseHandle {
    type Rejection = IdempotencyRejection;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<LeaseHandle>()
            .cloned()
            .ok_or_else(|| IdempotencyRejection::MissingKey {
                header: "idempotency-key".into(),
            })
    }
}

/// The lease, if the request holds one.
impl<S: Send + Sync> OptionalFromRequestParts<S> for LeaseHandle {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<LeaseHandle>().cloned())
    }
}
