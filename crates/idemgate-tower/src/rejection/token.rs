//! [`TokenError`]: why a bearer token was refused, with or without the `jwt` feature.

/// Why a bearer token was refused (`401` problem `invalid-token`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The `Authorization` header is not `Bearer <token>` (RFC 6750 §2.1).
    #[error("the Authorization header is not `Bearer <token>`")]
    NotBearer,
    /// The token is not three base64url parts with a JSON header and claims.
    #[error("the bearer token is not a well-formed JWT")]
    Malformed,
    /// The token's `alg` is not the one its key allows (`none` never is).
    #[error("the token's algorithm `{0}` is not allowed for its key")]
    AlgorithmNotAllowed(String),
    /// No configured key matches the token's `kid`.
    #[error("no configured key matches the token's key id")]
    UnknownKey,
    /// The signature does not verify.
    #[error("the token's signature does not verify")]
    BadSignature,
    /// `exp` is past (beyond the leeway).
    #[error("the token has expired")]
    Expired,
    /// `nbf` is in the future (beyond the leeway).
    #[error("the token is not valid yet")]
    NotYetValid,
    /// `iss` is not the configured issuer.
    #[error("the token's issuer is not accepted")]
    WrongIssuer,
    /// `aud` does not name the configured audience.
    #[error("the token's audience is not accepted")]
    WrongAudience,
    /// A required claim is absent: `exp`, the principal claim, or `iss`/`aud` when configured.
    #[error("the token has no `{0}` claim")]
    MissingClaim(String),
    /// A claim has the wrong type: the principal claim must be a non-empty string or an
    /// integer, `iss` a string; `exp`/`nbf` must be numbers.
    #[error("the token's `{0}` claim has the wrong type")]
    BadClaim(String),
}
