//! Checks of request fields: each failure is a `400 invalid-request` naming the field.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use bytes::Bytes;
use idemgate_client::store_wire::{parse_token, StoreKey};
use idemgate_client::wire::{LeaseRef, ResponseParts};
use idemgate_core::{IdempotencyKey, Lease, ScopedKey, StoredResponse};

use crate::problem::ApiError;

/// Most header fields in a stored response.
pub const MAX_RESPONSE_HEADERS: usize = 256;

/// 1–`max` printable ASCII (0x20–0x7E), no leading or trailing space.
pub fn text(field: &str, s: &str, max: usize) -> Result<(), ApiError> {
    if s.is_empty() || s.len() > max {
        return Err(ApiError::invalid(
            field,
            format!("must be 1 to {max} characters, got {}", s.len()),
        ));
    }
    if let Some(i) = s.bytes().position(|b| !(0x20..=0x7e).contains(&b)) {
        return Err(ApiError::invalid(
            field,
            format!("byte {i} is outside printable ASCII (0x20-0x7E)"),
        ));
    }
    if s.starts_with(' ') || s.ends_with(' ') {
        return Err(ApiError::invalid(field, "has a leading or trailing space"));
    }
    Ok(())
}

/// The idempotency key syntax of [`IdempotencyKey::new`].
pub fn key(field: &str, s: &str) -> Result<IdempotencyKey, ApiError> {
    IdempotencyKey::new(s).map_err(|e| ApiError::invalid(field, e.to_string()))
}

/// `v` (or `default`) within `min..=max` ms.
pub fn ttl(
    field: &str,
    v: Option<u64>,
    min: u64,
    max: u64,
    default: Duration,
) -> Result<Duration, ApiError> {
    let ms = v.unwrap_or(default.as_millis() as u64);
    if !(min..=max).contains(&ms) {
        return Err(ApiError::invalid(
            field,
            format!("must be between {min} and {max} ms, got {ms}"),
        ));
    }
    Ok(Duration::from_millis(ms))
}

/// The record a public call names, in the caller's namespace: the principal is stored as
/// `ns:<namespace>:<principal>` (namespaces hold no `:`), so namespaces never share one.
pub fn public_key(
    namespace: &str,
    scope: &str,
    principal: &str,
    k: &str,
) -> Result<ScopedKey, ApiError> {
    text("scope", scope, 256)?;
    text("principal", principal, 256)?;
    Ok(ScopedKey {
        principal: scoped_principal(namespace, principal),
        route: scope.to_owned(),
        key: key("key", k)?,
    })
}

/// A store-API key (any principal and route up to 1,024 bytes), in the namespace.
pub fn store_key(namespace: &str, field: &str, k: &StoreKey) -> Result<ScopedKey, ApiError> {
    for (name, v) in [("principal", &k.principal), ("route", &k.route)] {
        if v.len() > 1024 {
            return Err(ApiError::invalid(
                format!("{field}.{name}"),
                "must be at most 1024 bytes",
            ));
        }
    }
    Ok(ScopedKey {
        principal: scoped_principal(namespace, &k.principal),
        route: k.route.clone(),
        key: key(&format!("{field}.key"), &k.key)?,
    })
}

/// `ns:<namespace>:<principal>`.
pub fn scoped_principal(namespace: &str, principal: &str) -> String {
    format!("ns:{namespace}:{principal}")
}

/// The lease a caller presents, for `key`.
pub fn lease(key: &ScopedKey, l: &LeaseRef) -> Result<Lease, ApiError> {
    let token = parse_token(&l.token).map_err(|e| ApiError::invalid("lease.token", e))?;
    Ok(Lease {
        key: key.clone(),
        fence: l.fence,
        token,
        expires_at: 0,
    })
}

/// A response to store: a final status other than `304`, valid header fields, base64 body.
pub fn response(r: &ResponseParts) -> Result<StoredResponse, ApiError> {
    if r.headers.len() > MAX_RESPONSE_HEADERS {
        return Err(ApiError::invalid(
            "response.headers",
            format!("at most {MAX_RESPONSE_HEADERS} fields"),
        ));
    }
    let mut headers = Vec::with_capacity(r.headers.len());
    for (i, (name, value)) in r.headers.iter().enumerate() {
        let name = http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            ApiError::invalid(format!("response.headers[{i}][0]"), "not a header name")
        })?;
        if idemgate_core::admin::is_reserved(name.as_str()) {
            return Err(ApiError::invalid(
                format!("response.headers[{i}][0]"),
                "reserved for the audit entry of `idemgate resolve`",
            ));
        }
        if idemgate_core::redact::is_form_header(name.as_str()) {
            return Err(ApiError::invalid(
                format!("response.headers[{i}][0]"),
                "reserved for the stored form of a redacted response",
            ));
        }
        http::HeaderValue::from_str(value).map_err(|_| {
            ApiError::invalid(
                format!("response.headers[{i}][1]"),
                "not a header value (visible ASCII, spaces and tabs)",
            )
        })?;
        headers.push((name.as_str().to_owned(), Bytes::from(value.clone())));
    }
    let body = B64
        .decode(&r.body_base64)
        .map_err(|e| ApiError::invalid("response.body_base64", format!("not base64: {e}")))?;
    let stored = StoredResponse {
        status: r.status,
        headers,
        body: Bytes::from(body),
        replayable: true,
        sealed_by: None,
    };
    idemgate_core::integrity::check_storable(&stored)
        .map_err(|e| ApiError::invalid("response.status", e))?;
    Ok(stored)
}

/// A stored response as the public API shows it.
pub fn response_parts(r: &StoredResponse) -> ResponseParts {
    ResponseParts {
        status: r.status,
        headers: r
            .headers
            .iter()
            .map(|(n, v)| (n.clone(), String::from_utf8_lossy(v).into_owned()))
            .collect(),
        body_base64: B64.encode(&r.body),
    }
}

/// Longest `Retry-After` a release may carry, in ms (a day).
const MAX_RELEASED_RETRY_AFTER_MS: u64 = idemgate_core::events::MAX_RETRY_AFTER_MS;

/// A release's `status` (a final status, 200–599, default `503`) and `retry_after_ms` (at most a day).
///
/// # Errors
/// `invalid-request` naming the field out of range.
pub fn released(
    status: Option<u16>,
    retry_after_ms: Option<u64>,
) -> Result<(u16, Option<u64>), ApiError> {
    let status = status.unwrap_or(503);
    if !idemgate_core::events::RELEASED_STATUSES.contains(&status) {
        let why = format!("must be a final HTTP status (200-599), got {status}");
        return Err(ApiError::invalid("status", why));
    }
    if let Some(ms) = retry_after_ms.filter(|ms| *ms > MAX_RELEASED_RETRY_AFTER_MS) {
        let why = format!("must be between 0 and {MAX_RELEASED_RETRY_AFTER_MS} ms, got {ms}");
        return Err(ApiError::invalid("retry_after_ms", why));
    }
    Ok((status, retry_after_ms))
}
