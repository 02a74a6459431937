//! HTTP answers of the contract as RFC 9457 problem details (`application/problem+json`).
//!
//! Each problem's `type` is the configured base URI plus `#anchor` (or the anchor directly
//! after a URN base, [`crate::policy::DEFAULT_PROBLEM_BASE`]), where the anchor names a section of
//! `docs/errors.md` that explains the error and what the client should do.
//! [`IdempotencyRejection::catalogue`] lists one of each kind.

use std::fmt;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use http::{Response, StatusCode};
use idemgate_core::KeyError;

use crate::body::BoxBody;
use crate::jwt::TokenError;
use crate::path::PathAmbiguity;
#[cfg(feature = "axum")]
use crate::policy::DEFAULT_PROBLEM_BASE;

/// Why idemgate answered a request itself.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdempotencyRejection {
    /// `400`: the route requires a key and none was sent.
    MissingKey {
        /// The header name expected.
        header: String,
    },
    /// `400`: the key header breaks a syntax rule.
    InvalidKey(KeyError),
    /// `401`: a covered request carries no principal.
    MissingPrincipal,
    /// `400`: the principal header appears more than once or holds a comma-separated list,
    /// so the caller is ambiguous.
    AmbiguousPrincipal {
        /// The principal header's name.
        header: String,
    },
    /// `401` with `WWW-Authenticate: Bearer error="invalid_token"` (RFC 6750 §3.1): the
    /// route's principal is a JWT claim and the bearer token is refused.
    InvalidToken(TokenError),
    /// `413`: the request body exceeds the limit.
    BodyTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// `400`: the request body could not be read.
    BodyUnreadable,
    /// `413`: the request body decodes (`Content-Encoding`) to more than the limit.
    DecodedBodyTooLarge {
        /// The decoded-size limit, in bytes.
        limit: usize,
    },
    /// `409` with `Retry-After`: the first request with this key is still running.
    RequestInFlight {
        /// Seconds to wait (at least 1).
        retry_after_secs: u64,
    },
    /// `422` (or `400`, per route): the key was used with a different request.
    FingerprintMismatch {
        /// The configured status.
        status: StatusCode,
    },
    /// `500`: the first attempt with this key failed; use a new key.
    PreviousAttemptFailed,
    /// `410`: the operation ran but its response was not kept (it streamed or was too large),
    /// or an operator recorded its outcome as not replayable (`idemgate resolve`).
    ResponseNotKept {
        /// The status the first client got.
        original_status: u16,
        /// The operator's text, for a key resolved as not replayable; `None` otherwise.
        detail: Option<String>,
    },
    /// `500`: the first attempt was forwarded and its result was never recorded (its lease
    /// lapsed): it may have run. Never `502`/`503`/`504`, which retry policies read as
    /// "nothing happened".
    OutcomeUnknown,
    /// `500`: the stored record fails validation or its checksum; it is never replayed.
    RecordCorrupt,
    /// `503`: the store cannot be reached, did not answer in time, or too many outcome
    /// writes are pending; nothing was forwarded.
    StoreUnavailable,
    /// `502`: the upstream's response broke off after its headers; the operation may have
    /// run, so the record is failed.
    UpstreamResponseFailed,
    /// `502`: the upstream could not be reached; nothing was sent, so the key was released
    /// (the gateway's answer to an inner [`NotSent`](crate::NotSent) error).
    UpstreamUnreachable,
    /// `502`: the connection to the upstream failed after the request was sent; the
    /// operation may have run, so the record is failed.
    UpstreamFailed,
    /// `502`: the upstream's response head had more header fields than the gateway accepts
    /// (`max_response_headers`); the operation may have run, so the record is failed.
    UpstreamHeadTooLarge,
    /// `504`: the upstream did not answer within its timeout; the operation may have run,
    /// so the record is failed.
    UpstreamTimeout,
    /// `500`: the operation (the inner service, e.g. an axum handler) panicked while it
    /// ran; it may have partly run, so the record is failed.
    OperationPanicked,
    /// `500`: an internal failure in idemgate; nothing is known to have run.
    Internal,
    /// `429` with `Retry-After`: this caller is over a per-principal limit of the route
    /// (see [`crate::limits`]); nothing was stored or forwarded.
    PrincipalLimited {
        /// Which limit.
        kind: LimitKind,
        /// Seconds to wait (at least 1): when the caller's next token is due, or 1 for
        /// the in-flight limit.
        retry_after_secs: u64,
    },
    /// `400`: the request path is spelled in a way servers read differently (see
    /// [`crate::path`]); nothing was stored or forwarded, with or without a key.
    AmbiguousPath(PathAmbiguity),
    /// `400` (`ambiguous-path`): the path matches `route` as it is and `sibling` only
    /// through letter-case folding or a trailing slash (see
    /// [`Policy::resolve`](crate::Policy::resolve)), so servers disagree on which handler
    /// runs; nothing was stored or forwarded, with or without a key.
    AmbiguousRoute {
        /// The route the path matches as it is (`METHOD /template`).
        route: String,
        /// The route it reaches through folding or a trailing slash.
        sibling: String,
    },
    /// `400` (`ambiguous-request`): the method is a covered one in another letter case
    /// (`post`); some servers route it as the covered one. Nothing was stored or
    /// forwarded, with or without a key.
    AmbiguousMethod {
        /// The method as sent.
        method: String,
    },
    /// `414`: the scope of a covered request that matches no route (`METHOD /path`, in
    /// normal form) is longer than the limit
    /// ([`MAX_SCOPE_ROUTE_BYTES`](crate::policy::MAX_SCOPE_ROUTE_BYTES)), so it could not be
    /// stored; nothing was stored or forwarded.
    PathTooLong {
        /// The limit, in bytes.
        limit: usize,
    },
    /// `404`: the path matches no route and the policy refuses such requests
    /// ([`Unmatched::Refuse`](crate::path::Unmatched::Refuse)); nothing was forwarded.
    NoSuchRoute,
    /// `400`: a header that changes what the upstream runs is repeated (`Content-Type`,
    /// `Content-Encoding`, one of the route's `fingerprint_headers`), or `Content-Length`
    /// has differing values; nothing was stored or forwarded.
    AmbiguousRequest {
        /// The header's name, in lower case.
        header: String,
    },
    /// `400` (`ambiguous-request`): a covered request carries a header that makes some
    /// upstream run another path or method than its request line names
    /// ([`Policy::override_headers`](crate::Policy::override_headers)); nothing was stored or
    /// forwarded, with or without a key.
    OverrideHeader {
        /// The header's name, in lower case.
        header: String,
    },
}

/// Which per-principal limit a request is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LimitKind {
    /// Too many of the caller's requests in flight at once.
    InFlight,
    /// Too many new keys per second.
    NewKeys,
}

impl IdempotencyRejection {
    /// The HTTP status of this answer.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::MissingKey { .. } | Self::InvalidKey(_) | Self::BodyUnreadable => {
                StatusCode::BAD_REQUEST
            }
            Self::MissingPrincipal | Self::InvalidToken(_) => StatusCode::UNAUTHORIZED,
            Self::AmbiguousPrincipal { .. }
            | Self::AmbiguousPath(_)
            | Self::AmbiguousRoute { .. }
            | Self::AmbiguousMethod { .. }
            | Self::AmbiguousRequest { .. }
            | Self::OverrideHeader { .. } => StatusCode::BAD_REQUEST,
            Self::NoSuchRoute => StatusCode::NOT_FOUND,
            Self::PathTooLong { .. } => StatusCode::URI_TOO_LONG,
            Self::BodyTooLarge { .. } | Self::DecodedBodyTooLarge { .. } => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            Self::RequestInFlight { .. } => StatusCode::CONFLICT,
            Self::FingerprintMismatch { status } => *status,
            Self::PreviousAttemptFailed
            | Self::OutcomeUnknown
            | Self::RecordCorrupt
            | Self::OperationPanicked
            | Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Self::ResponseNotKept { .. } => StatusCode::GONE,
            Self::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::UpstreamResponseFailed
            | Self::UpstreamUnreachable
            | Self::UpstreamFailed
            | Self::UpstreamHeadTooLarge => StatusCode::BAD_GATEWAY,
            Self::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            Self::PrincipalLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// The anchor of this error's section in `docs/errors.md`.
    pub fn anchor(&self) -> &'static str {
        match self {
            Self::MissingKey { .. } => "missing-key",
            Self::InvalidKey(_) => "invalid-key",
            Self::MissingPrincipal => "missing-principal",
            Self::AmbiguousPrincipal { .. } => "ambiguous-principal",
            Self::InvalidToken(_) => "invalid-token",
            Self::BodyTooLarge { .. } | Self::DecodedBodyTooLarge { .. } => "body-too-large",
            Self::BodyUnreadable => "body-unreadable",
            Self::RequestInFlight { .. } => "request-in-flight",
            Self::FingerprintMismatch { .. } => "fingerprint-mismatch",
            Self::PreviousAttemptFailed => "previous-attempt-failed",
            Self::ResponseNotKept { .. } => "response-not-kept",
            Self::OutcomeUnknown => "outcome-unknown",
            Self::RecordCorrupt => "record-corrupt",
            Self::StoreUnavailable => "store-unavailable",
            Self::UpstreamResponseFailed => "upstream-response-failed",
            Self::UpstreamUnreachable => "upstream-unreachable",
            Self::UpstreamFailed | Self::UpstreamHeadTooLarge => "upstream-failed",
            Self::UpstreamTimeout => "upstream-timeout",
            Self::OperationPanicked => "operation-panicked",
            Self::Internal => "internal",
            Self::PrincipalLimited { .. } => "principal-limited",
            Self::AmbiguousPath(_) | Self::AmbiguousRoute { .. } => "ambiguous-path",
            Self::AmbiguousMethod { .. } => "ambiguous-request",
            Self::PathTooLong { .. } => "path-too-long",
            Self::NoSuchRoute => "no-such-route",
            Self::AmbiguousRequest { .. } | Self::OverrideHeader { .. } => "ambiguous-request",
        }
    }

    /// The problem's `title`: the same for every occurrence of the type.
    pub fn title(&self) -> &'static str {
        match self {
            Self::MissingKey { .. } => "Idempotency key required",
            Self::InvalidKey(_) => "Invalid idempotency key",
            Self::MissingPrincipal => "Authentication required",
            Self::AmbiguousPrincipal { .. } => "Ambiguous principal",
            Self::InvalidToken(_) => "Invalid bearer token",
            Self::BodyTooLarge { .. } | Self::DecodedBodyTooLarge { .. } => {
                "Request body too large"
            }
            Self::BodyUnreadable => "Request body unreadable",
            Self::RequestInFlight { .. } => "Request in progress",
            Self::FingerprintMismatch { .. } => "Idempotency key reused with a different request",
            Self::PreviousAttemptFailed => "Previous attempt failed",
            Self::ResponseNotKept { .. } => "Response not kept",
            Self::OutcomeUnknown => "Outcome unknown",
            Self::RecordCorrupt => "Stored record corrupt",
            Self::StoreUnavailable => "Idempotency store unavailable",
            Self::UpstreamResponseFailed => "Upstream response failed",
            Self::UpstreamUnreachable | Self::UpstreamFailed | Self::UpstreamHeadTooLarge => {
                "Bad gateway"
            }
            Self::UpstreamTimeout => "Upstream timeout",
            Self::OperationPanicked => "Operation failed",
            Self::Internal => "Internal error",
            Self::PrincipalLimited { .. } => "Too many requests from this caller",
            Self::AmbiguousPath(_) | Self::AmbiguousRoute { .. } => "Ambiguous request path",
            Self::AmbiguousMethod { .. } => "Ambiguous request",
            Self::PathTooLong { .. } => "Request path too long",
            Self::NoSuchRoute => "No such route",
            Self::AmbiguousRequest { .. } | Self::OverrideHeader { .. } => "Ambiguous request",
        }
    }

    /// The problem's `detail`: this occurrence, and what the client should do.
    pub fn detail(&self) -> String {
        match self {
            Self::MissingKey { header } => {
                format!("This operation requires an `{header}` header with a unique value (a UUID v4 is a good choice).")
            }
            Self::InvalidKey(e) => format!("{e}."),
            Self::MissingPrincipal => {
                "Idempotency keys are scoped to the caller; send credentials.".into()
            }
            Self::AmbiguousPrincipal { header } => format!("The `{header}` header names the caller, so it must appear once with one value in visible ASCII; this request carries it more than once, as a comma-separated list, or with other bytes (which parsers decode differently). Nothing was run."),
            Self::InvalidToken(e) => format!("{e}. Idempotency keys are scoped to the token's subject; send a valid token and retry with the same key."),
            Self::BodyTooLarge { limit } => format!("The request body exceeds {limit} bytes."),
            Self::BodyUnreadable => "The request body could not be read completely.".into(),
            Self::DecodedBodyTooLarge { limit } => format!("The request body decoded (Content-Encoding) exceeds {limit} bytes; decoding stopped there. Send a smaller body."),
            Self::RequestInFlight { .. } => "A request with this idempotency key is still being processed. Retry after the time in Retry-After.".into(),
            Self::FingerprintMismatch { .. } => "This idempotency key was already used with a different request (method, path, query or body). Use a new key for a new request.".into(),
            Self::PreviousAttemptFailed => "The first request with this idempotency key failed after it may have reached the server. It is not run again; use a new key.".into(),
            Self::ResponseNotKept { original_status, detail: None } => format!("The operation with this idempotency key ran (status {original_status}), but its response streamed or was too large to keep. Do not retry with a new key: fetch the result instead."),
            Self::ResponseNotKept { original_status, detail: Some(note) } => format!("The operation with this idempotency key ran (status {original_status}); its response is not available. An operator recorded: \"{note}\". Do not retry with a new key."),
            Self::OutcomeUnknown => "The first attempt with this idempotency key was forwarded and its result was never recorded, so it may have run. Check the resource before retrying with a new key.".into(),
            Self::RecordCorrupt => "The stored result for this idempotency key is damaged and is not replayed. The operation ran before; check the resource instead of retrying with a new key.".into(),
            Self::StoreUnavailable => "The idempotency store is unreachable or too slow, so the request was not forwarded. Retry with the same key after the time in Retry-After.".into(),
            Self::UpstreamResponseFailed => "The upstream's response broke off after it began, so the operation may have run. The key is marked failed; check the operation's result before using a new key.".into(),
            Self::UpstreamUnreachable => "The API could not be reached; nothing was sent. Retry the request (with the same idempotency key, if it had one).".into(),
            Self::UpstreamFailed => "The connection to the API failed after the request was sent, so the operation may have run. The key is marked failed; check the result before using a new key.".into(),
            Self::UpstreamHeadTooLarge => "The API's response had more header fields than the gateway accepts (max_response_headers), so it was not delivered. The operation may have run: the key is marked failed; check the result before using a new key.".into(),
            Self::UpstreamTimeout => "The API did not answer in time. The operation may have run: the key is marked failed; check the result before using a new key.".into(),
            Self::OperationPanicked => "The operation with this idempotency key failed while it ran, so it may have partly run. The key is marked failed; check the result before using a new key.".into(),
            Self::Internal => "An internal error occurred. Retry with the same key.".into(),
            Self::PrincipalLimited { kind: LimitKind::InFlight, .. } => "Too many of your requests are in progress on this operation; nothing was stored or forwarded. Retry with the same key after the time in Retry-After.".into(),
            Self::PrincipalLimited { kind: LimitKind::NewKeys, .. } => "You are sending new idempotency keys faster than this operation allows; nothing was stored or forwarded. Retry with the same key after the time in Retry-After.".into(),
            Self::AmbiguousPath(why) => format!("The request path holds {why}, which servers read in different ways, so it is not clear which operation it names. Nothing was stored or forwarded. Send the path in its plain form (e.g. `/charges`, not `//charges`, `/./charges` or `/charges;x=1`)."),
            Self::AmbiguousRoute { route, sibling } => format!("The request path matches the route `{route}` as it is and the route `{sibling}` through letter case or a trailing slash, and servers disagree on which of the two runs. Nothing was stored or forwarded. Send the path exactly as the operation's route spells it."),
            Self::AmbiguousMethod { method } => format!("The method `{method}` is a method this API covers in another letter case; some servers run it as that method, others as another one, so it is not clear which operation, and which idempotency record, this request is. Nothing was stored or forwarded. Send the method in upper case (e.g. `POST`)."),
            Self::PathTooLong { limit } => format!("The request path is too long for an idempotency record: its method and path in normal form exceed {limit} bytes. Nothing was stored or forwarded. Send a shorter path (move long values into the body)."),
            Self::NoSuchRoute => "No route of this API matches the request's method and path, and requests outside its routes are refused. Nothing was forwarded. Check the path and its spelling.".into(),
            Self::AmbiguousRequest { header } => format!("The `{header}` header appears more than once or with differing values, so the API could read this request differently from the way idemgate recorded it. Nothing was stored or forwarded. Send the header once."),
            Self::OverrideHeader { header } => format!("The `{header}` header makes some servers run another path or method than the request line names (a path prefix stripped, a POST run as PATCH), so it is not clear which operation, and which idempotency record, this request is. Nothing was stored or forwarded. Send the request without it, with the method and path of the operation itself."),
        }
    }

    /// Builds the `application/problem+json` response with base URI `type_base` (see
    /// [`crate::policy::DEFAULT_PROBLEM_BASE`]). With feature `axum`, a handler can return
    /// the rejection itself (`IntoResponse`, the default base); this inherent method takes
    /// precedence in method-call syntax, so call the trait's as
    /// `IntoResponse::into_response(rejection)`.
    pub fn into_response(self, type_base: &str) -> Response<BoxBody> {
        let mut resp = problem(
            self.status(),
            type_base,
            self.anchor(),
            self.title(),
            &self.detail(),
        );
        match &self {
            Self::RequestInFlight { retry_after_secs } => {
                resp.headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from(*retry_after_secs));
            }
            Self::StoreUnavailable => {
                resp.headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from_static("1"));
            }
            Self::InvalidToken(_) => {
                resp.headers_mut().insert(
                    WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer error=\"invalid_token\""),
                );
            }
            Self::PrincipalLimited {
                retry_after_secs, ..
            } => {
                resp.headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from(*retry_after_secs));
            }
            _ => {}
        }
        resp
    }
}

/// An RFC 9457 problem response: `{"type","title","status","detail"}` with
/// `Content-Type: application/problem+json`; `type` is `type_base` + `anchor` when the base
/// ends with `:` (`urn:idemgate:problem:invalid-key`), else `type_base#anchor`.
fn problem(
    status: StatusCode,
    type_base: &str,
    anchor: &str,
    title: &str,
    detail: &str,
) -> Response<BoxBody> {
    let body = serde_json::json!({
        "type": if type_base.ends_with(':') {
            format!("{type_base}{anchor}")
        } else {
            format!("{type_base}#{anchor}")
        },
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
    });
    let bytes = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
    let mut resp = Response::new(crate::body::full(bytes));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    resp
}

impl fmt::Display for IdempotencyRejection {
    /// `<status> <title>: <detail>`, e.g. `409 Request in progress: A request with...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self.status().as_u16();
        write!(f, "{status} {}: {}", self.title(), self.detail())
    }
}

impl std::error::Error for IdempotencyRejection {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::InvalidKey(e) => Some(e),
            Self::InvalidToken(e) => Some(e),
            _ => None,
        }
    }
}

/// The problem response with the default `type` base ([`crate::policy::DEFAULT_PROBLEM_BASE`]), so a
/// handler can return a rejection (`Result<_, IdempotencyRejection>`).
#[cfg(feature = "axum")]
impl axum::response::IntoResponse for IdempotencyRejection {
    fn into_response(self) -> axum::response::Response {
        IdempotencyRejection::into_response(self, DEFAULT_PROBLEM_BASE).map(axum::body::Body::new)
    }
}

mod catalogue;
