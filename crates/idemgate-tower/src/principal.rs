//! The principal: the caller a record belongs to. Keys are scoped by (principal, route, key),
//! so one caller can never read another's stored responses, whatever key it sends.
//!
//! A route reads its principal from one [`PrincipalSource`]:
//!
//! | source | reads | principal |
//! |---|---|---|
//! | [`PrincipalSource::AuthorizationHash`] (default) | every `Authorization` line | `auth:` + 32 hex digits |
//! | [`PrincipalSource::AuthorizationHmac`] | every `Authorization` line, keyed | `hauth:` + 32 hex digits |
//! | [`PrincipalSource::Header`] | one named header, set by the auth layer in front | `hdr:<value>` |
//! | [`PrincipalSource::Jwt`] | a verified bearer token's claim | `jwt:<claim>:<hash>` |
//! | [`PrincipalSource::extension`] | a request extension `T` (axum auth layers) | `ext:<T as Display>` |
//! | [`PrincipalSource::from_fn`] | a closure over the request's parts | `fn:<value>` |
//! | [`PrincipalSource::custom`] | any [`Principal`] | what it returns |
//!
//! Only the chosen source is read: with an extension or a closure, a client-sent header of
//! any name has no effect on the scope.
//!
//! # Examples
//! An axum auth layer puts the caller in the request's extensions; idemgate reads it there:
//! ```
//! use idemgate_tower::{Policy, PrincipalSource};
//!
//! #[derive(Clone, Debug)]
//! struct UserId(u64);
//! impl std::fmt::Display for UserId {
//!     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
//!         write!(f, "user-{}", self.0)
//!     }
//! }
//! let policy = Policy::default().with_principal(PrincipalSource::extension::<UserId>());
//! # let _ = policy;
//! ```

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use http::header::AUTHORIZATION;
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Request};
use sha2::{Digest, Sha256};

use crate::jwt::{JwtVerifier, TokenError};
use crate::rejection::IdempotencyRejection;

/// Names the caller of a request, from its parts (method, URI, headers, extensions).
///
/// Implement it for a principal source the built-in ones do not cover; closures get one
/// through [`PrincipalSource::from_fn`].
pub trait Principal: Send + Sync + 'static {
    /// The caller of the request with `parts`: `Ok(None)` when the request names none (it
    /// then gets `401`, or the anonymous scope on routes with `allow_anonymous`).
    ///
    /// # Errors
    /// A rejection answered to the client instead of running the request, such as
    /// [`IdempotencyRejection::AmbiguousPrincipal`] or
    /// [`IdempotencyRejection::InvalidToken`].
    fn principal(&self, parts: &Parts) -> Result<Option<String>, IdempotencyRejection>;
}

/// Where a route's principal comes from. See the [module docs](self) for each source.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum PrincipalSource {
    /// SHA-256 of the `Authorization` header (default): see [`authorization_principal`].
    #[default]
    AuthorizationHash,
    /// HMAC-SHA256 of the `Authorization` header with a deployment secret: as
    /// [`PrincipalSource::AuthorizationHash`], but a stored principal (in the store, a
    /// backup, an `inspect` output) cannot be tested offline against guessed credentials,
    /// which matters for Basic auth and short API keys. See [`authorization_hmac`].
    ///
    /// Switching a route to it (or from it, or to another key) changes the scope of every
    /// caller: keys in flight at that moment are not found by their retries, which run as
    /// new requests. Switch while no retries of earlier requests are expected (or accept
    /// that their retries run again).
    AuthorizationHmac(Arc<PrincipalHashKey>),
    /// The value of a header set by the authentication layer in front (e.g. `x-user-id`).
    /// A request carrying it more than once, as a comma-separated list or with bytes
    /// outside visible ASCII gets `400` `ambiguous-principal` (RFC 9110 §5.3: repeated
    /// lines and a list are the same field). Only safe when the layer in front always
    /// overwrites the header a client may send.
    Header(HeaderName),
    /// A claim (e.g. `sub`) of the `Authorization: Bearer` JWT, verified by `verifier`
    /// (RFC 7519, RFC 6750); an invalid token gets `401` `invalid-token`. The principal is
    /// `jwt:<claim>:<hash>` (see [`crate::jwt`]), so a refreshed token keeps the scope.
    Jwt {
        /// The claim naming the caller: a string or an integer.
        claim: String,
        /// The verifier holding the keys, loaded once.
        verifier: Arc<JwtVerifier>,
    },
    /// Any other source: a request extension, a closure or an own [`Principal`].
    Custom(Arc<dyn Principal>),
}

impl PrincipalSource {
    /// The principal from the request extension `T` (what axum's `Extension<T>` reads),
    /// as `ext:` followed by `T`'s `Display` output, which must name one caller. A request
    /// without the extension names no caller.
    pub fn extension<T>() -> Self
    where
        T: fmt::Display + Send + Sync + 'static,
    {
        Self::Custom(Arc::new(FromExtension::<T>(PhantomData)))
    }

    /// The principal `f` computes from the request's parts, as `fn:` followed by what it
    /// returns; `None` names no caller.
    pub fn from_fn<F>(f: F) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        Self::Custom(Arc::new(FromFn(f)))
    }

    /// The principal `source` gives, as it returns it.
    pub fn custom(source: impl Principal) -> Self {
        Self::Custom(Arc::new(source))
    }
}

impl fmt::Debug for PrincipalSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AuthorizationHash => f.write_str("AuthorizationHash"),
            Self::AuthorizationHmac(_) => f.write_str("AuthorizationHmac(..)"),
            Self::Header(name) => f.debug_tuple("Header").field(name).finish(),
            Self::Jwt { claim, verifier } => f
                .debug_struct("Jwt")
                .field("claim", claim)
                .field("verifier", verifier)
                .finish(),
            Self::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

/// Custom sources compare by identity, like [`JwtVerifier`]s.
impl PartialEq for PrincipalSource {
    fn eq(&self, other: &Self) -> bool {
        use PrincipalSource as P;
        match (self, other) {
            (P::AuthorizationHash, P::AuthorizationHash) => true,
            (P::AuthorizationHmac(a), P::AuthorizationHmac(b)) => a == b,
            (P::Header(a), P::Header(b)) => a == b,
            (
                P::Jwt { claim, verifier },
                P::Jwt {
                    claim: c,
                    verifier: v,
                },
            ) => (claim, verifier) == (c, v),
            (P::Custom(a), P::Custom(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}
impl Eq for PrincipalSource {}

impl Principal for PrincipalSource {
    fn principal(&self, parts: &Parts) -> Result<Option<String>, IdempotencyRejection> {
        let headers = &parts.headers;
        let authorization = || headers.get_all(AUTHORIZATION).iter().map(|v| v.as_bytes());
        match self {
            Self::AuthorizationHash => Ok(authorization_principal(authorization())),
            Self::AuthorizationHmac(key) => Ok(authorization_hmac(key, authorization())),
            Self::Header(name) => {
                let Some(value) = single(headers, name)? else {
                    return Ok(None);
                };
                // Bytes outside visible ASCII: some layers decode them as Latin-1, others
                // as UTF-8, and none of them is "no caller".
                let v = value.to_str().map_err(|_| ambiguous(name))?.trim();
                if v.contains(',') {
                    return Err(ambiguous(name));
                }
                Ok((!v.is_empty()).then(|| format!("hdr:{v}")))
            }
            Self::Jwt { claim, verifier } => {
                let Some(value) = single(headers, &AUTHORIZATION)? else {
                    return Ok(None);
                };
                let invalid = IdempotencyRejection::InvalidToken;
                let v = value
                    .to_str()
                    .map_err(|_| invalid(TokenError::NotBearer))?
                    .trim();
                if v.is_empty() {
                    return Ok(None);
                }
                let token = bearer_token(v).ok_or(invalid(TokenError::NotBearer))?;
                verifier.principal(token, claim).map(Some).map_err(invalid)
            }
            Self::Custom(source) => source.principal(parts),
        }
    }
}

/// The principal from request extension `T` ([`PrincipalSource::extension`]).
struct FromExtension<T>(PhantomData<fn() -> T>);

impl<T: fmt::Display + Send + Sync + 'static> Principal for FromExtension<T> {
    fn principal(&self, parts: &Parts) -> Result<Option<String>, IdempotencyRejection> {
        let Some(caller) = parts.extensions.get::<T>() else {
            return Ok(None);
        };
        let caller = caller.to_string();
        Ok((!caller.is_empty()).then(|| format!("ext:{caller}")))
    }
}

/// The principal from a closure ([`PrincipalSource::from_fn`]).
struct FromFn<F>(F);

impl<F> Principal for FromFn<F>
where
    F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
{
    fn principal(&self, parts: &Parts) -> Result<Option<String>, IdempotencyRejection> {
        Ok((self.0)(parts)
            .filter(|p| !p.is_empty())
            .map(|p| format!("fn:{p}")))
    }
}

/// The principal `source` gives a request whose only `Authorization` line is `value`, as
/// the layer computes it: operators use it to find a caller's records from their header
/// (`idemgate inspect --authorization`). `Ok(None)` when that names no caller (a blank
/// value, or a source that does not read `Authorization`).
///
/// # Errors
/// As [`IdempotencyRejection`]: [`IdempotencyRejection::InvalidToken`] for a refused JWT.
pub fn principal_from_authorization(
    source: &PrincipalSource,
    value: &str,
) -> Result<Option<String>, IdempotencyRejection> {
    let value = HeaderValue::from_str(value)
        .map_err(|_| IdempotencyRejection::InvalidToken(TokenError::NotBearer))?;
    let (mut parts, ()) = Request::new(()).into_parts();
    parts.headers.insert(AUTHORIZATION, value);
    source.principal(&parts)
}

/// The principal the default source ([`PrincipalSource::AuthorizationHash`]) gives a
/// request whose `Authorization` lines are `values`, as received: `auth:` and 32 hex
/// digits, the first 16 bytes of SHA-256 over each non-blank value followed by `\n`.
/// `None` when every value is blank (the request names no caller). Operators use it to
/// find a caller's records from the header (`idemgate inspect --authorization`).
pub fn authorization_principal<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Option<String> {
    let h = hash_lines(Sha256::new(), values)?;
    Some(format!("auth:{}", hex::encode(&h.finalize()[..16])))
}

/// `h` fed each non-blank value followed by `\n`; `None` when every value is blank.
fn hash_lines<'a, H: sha2::digest::Update>(
    mut h: H,
    values: impl IntoIterator<Item = &'a [u8]>,
) -> Option<H> {
    let mut values = values.into_iter().filter(|v| !v.trim_ascii().is_empty());
    let first = values.next()?;
    for v in std::iter::once(first).chain(values) {
        h.update(v);
        h.update(b"\n");
    }
    Some(h)
}

/// The secret of [`PrincipalSource::AuthorizationHmac`]: at least
/// [`PrincipalHashKey::MIN_BYTES`] bytes. Its `Debug` output never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct PrincipalHashKey(Vec<u8>);

/// A principal hash key shorter than [`PrincipalHashKey::MIN_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the principal hash key has {0} bytes; it needs at least {min}", min = PrincipalHashKey::MIN_BYTES)]
pub struct PrincipalHashKeyTooShort(pub usize);

impl PrincipalHashKey {
    /// The shortest key, in bytes: 32, the HMAC-SHA256 block's half (RFC 2104 §3).
    pub const MIN_BYTES: usize = 32;

    /// A key of raw `bytes`.
    ///
    /// # Errors
    /// [`PrincipalHashKeyTooShort`] below [`PrincipalHashKey::MIN_BYTES`].
    pub fn new(bytes: &[u8]) -> Result<Self, PrincipalHashKeyTooShort> {
        if bytes.len() < Self::MIN_BYTES {
            return Err(PrincipalHashKeyTooShort(bytes.len()));
        }
        Ok(Self(bytes.to_vec()))
    }
}

impl fmt::Debug for PrincipalHashKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PrincipalHashKey(..)")
    }
}

/// The principal [`PrincipalSource::AuthorizationHmac`] gives a request whose
/// `Authorization` lines are `values`: `hauth:` and 32 hex digits, the first 16 bytes of
/// HMAC-SHA256 (RFC 2104) under `key` over each non-blank value followed by `\n`. `None`
/// when every value is blank.
pub fn authorization_hmac<'a>(
    key: &PrincipalHashKey,
    values: impl IntoIterator<Item = &'a [u8]>,
) -> Option<String> {
    use hmac::Mac;
    // HMAC takes a key of any length.
    let mac = hmac::Hmac::<Sha256>::new_from_slice(&key.0).ok()?;
    let tag = hash_lines(mac, values)?.finalize().into_bytes();
    Some(format!("hauth:{}", hex::encode(&tag[..16])))
}

/// The one value of header `name`, if any; a repeated header is ambiguous.
fn single<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
) -> Result<Option<&'a HeaderValue>, IdempotencyRejection> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(ambiguous(name));
    }
    Ok(first)
}

fn ambiguous(name: &HeaderName) -> IdempotencyRejection {
    IdempotencyRejection::AmbiguousPrincipal {
        header: name.to_string(),
    }
}

/// The token of `Bearer <token>`; the scheme is case-insensitive (RFC 9110 §11.1).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests;
