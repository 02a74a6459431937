//! Admission of a covered request: its principal, its body and its fingerprint.

use http::header::{AUTHORIZATION, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, HeaderName, HeaderValue};
use idemgate_core::fingerprint::{
    Fingerprint, FingerprintError, FingerprintInput, FingerprintOptions,
};
use sha2::{Digest, Sha256};

use crate::jwt::TokenError;
use crate::policy::{PrincipalSource, RoutePolicy};
use crate::rejection::IdempotencyRejection;

/// The caller a record belongs to, from the route's principal source: `Ok(None)` when the
/// request names no caller.
///
/// # Errors
/// [`IdempotencyRejection::AmbiguousPrincipal`] when the principal header (the
/// `Authorization` header for a JWT source) appears more than once, or, for a header source,
/// holds a comma-separated list (RFC 9110 §5.3: repeated lines and a list are the same
/// field); [`IdempotencyRejection::InvalidToken`] when a JWT source's token is refused.
pub(crate) fn principal_of(
    headers: &HeaderMap,
    source: &PrincipalSource,
) -> Result<Option<String>, IdempotencyRejection> {
    match source {
        PrincipalSource::AuthorizationHash => Ok(authorization_hash(headers)),
        PrincipalSource::Header(name) => {
            let Some(value) = single(headers, name)? else {
                return Ok(None);
            };
            // Bytes outside visible ASCII: some layers decode them as Latin-1, others as
            // UTF-8, and none of them is "no caller".
            let v = value.to_str().map_err(|_| ambiguous(name))?.trim();
            if v.contains(',') {
                return Err(ambiguous(name));
            }
            Ok((!v.is_empty()).then(|| format!("hdr:{v}")))
        }
        PrincipalSource::Jwt { claim, verifier } => {
            let Some(value) = single(headers, &AUTHORIZATION)? else {
                return Ok(None);
            };
            let invalid = IdempotencyRejection::InvalidToken;
            let v = value.to_str().map_err(|_| invalid(TokenError::NotBearer))?;
            let v = v.trim();
            if v.is_empty() {
                return Ok(None);
            }
            let token = bearer_token(v).ok_or(invalid(TokenError::NotBearer))?;
            verifier.principal(token, claim).map(Some).map_err(invalid)
        }
    }
}

/// The principal `source` gives a request whose only `Authorization` line is `value`, as
/// the layer computes it: operators use it to find a caller's records from their header
/// (`idemgate inspect --authorization`). `Ok(None)` when that names no caller (a blank
/// value, or a `header:` source, which does not read `Authorization`).
///
/// # Errors
/// As [`IdempotencyRejection`]: [`IdempotencyRejection::InvalidToken`] for a refused JWT.
pub fn principal_from_authorization(
    source: &PrincipalSource,
    value: &str,
) -> Result<Option<String>, IdempotencyRejection> {
    let value = HeaderValue::from_str(value)
        .map_err(|_| IdempotencyRejection::InvalidToken(TokenError::NotBearer))?;
    let mut headers = HeaderMap::new();
    headers.insert(AUTHORIZATION, value);
    principal_of(&headers, source)
}

/// SHA-256 of every non-empty `Authorization` value, as `auth:<hex>`.
fn authorization_hash(headers: &HeaderMap) -> Option<String> {
    authorization_principal(headers.get_all(AUTHORIZATION).iter().map(|v| v.as_bytes()))
}

/// The principal the default source ([`PrincipalSource::AuthorizationHash`]) gives a
/// request whose `Authorization` lines are `values`, as received: `auth:` and 32 hex
/// digits, the first 16 bytes of SHA-256 over each non-blank value followed by `\n`.
/// `None` when every value is blank (the request names no caller). Operators use it to
/// find a caller's records from the header (`idemgate inspect --authorization`).
pub fn authorization_principal<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Option<String> {
    let mut values = values
        .into_iter()
        .filter(|v| !v.trim_ascii().is_empty())
        .peekable();
    values.peek()?;
    let mut h = Sha256::new();
    for v in values {
        h.update(v);
        h.update(b"\n");
    }
    Some(format!("auth:{}", hex::encode(&h.finalize()[..16])))
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

/// The request's fingerprint by algorithm `version`.
///
/// Version 1 decodes up to 8 × `max_body_bytes`, as the releases that wrote it did, so its
/// digest is unchanged; version 2 up to the route's decoded-body limit. From version 2 on,
/// a `Content-Type` or `Content-Encoding` sent more than once or not in visible ASCII is
/// also hashed as received, header by header: upstreams read such requests in more than
/// one way.
///
/// # Errors
/// [`FingerprintError::DecodedTooLarge`] past the decoded-body limit (version 2), and
/// [`FingerprintError::UnknownVersion`].
pub(crate) fn fingerprint_of(
    req: (&http::Method, &http::Uri, &HeaderMap),
    route: &str,
    rp: &RoutePolicy,
    body: &[u8],
    version: u16,
) -> Result<Fingerprint, FingerprintError> {
    let (method, uri, headers) = req;
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let mut extra: Vec<(&str, &[u8])> = rp
        .fingerprint_headers
        .iter()
        .flat_map(|n| {
            headers
                .get_all(n)
                .iter()
                .map(move |v| (n.as_str(), v.as_bytes()))
        })
        .collect();
    if version >= 2 {
        for name in ["content-type", "content-encoding"] {
            let values = headers.get_all(name);
            let odd = values.iter().count() > 1 || values.iter().any(|v| v.to_str().is_err());
            if odd {
                extra.extend(values.iter().map(|v| (name, v.as_bytes())));
            }
        }
    }
    let input = FingerprintInput {
        method: method.as_str(),
        route,
        path: uri.path(),
        query: uri.query(),
        content_type: header(CONTENT_TYPE),
        content_encoding: header(CONTENT_ENCODING),
        headers: &extra,
        body,
    };
    let opts = FingerprintOptions {
        ignore_json_pointers: &rp.ignore_json_pointers,
        max_decoded_bytes: match version {
            1 => rp.max_body_bytes.saturating_mul(8),
            _ => rp.decoded_body_limit(),
        },
    };
    Fingerprint::compute_version(version, &input, &opts)
}

/// The `Content-Length` header as a number, if present and valid.
pub(crate) fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests;
