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
use idemgate_core::problem::{self, ProblemType};
use idemgate_core::KeyError;

use crate::body::BoxBody;
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
    /// The status the first request's client got (with its `Retry-After`): while this
    /// request waited for it (`on_in_flight = "wait"`), the first ended without running the
    /// operation (its key released by the route's `release_statuses`) and was not run again
    /// within the wait. Nothing was stored; retry with the same key.
    PreviousAttemptReleased {
        /// The first request's status.
        status: StatusCode,
        /// Its `Retry-After`, in whole seconds, if it had one.
        retry_after_secs: Option<u64>,
    },
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
    /// This answer's problem type in the catalogue of every front door
    /// ([`idemgate_core::problem`]).
    pub fn problem_type(&self) -> ProblemType {
        // Every variant is named, without a wildcard: a new kind of rejection does not
        // compile until it is named here, and then it joins `catalogue` too.
        match self {
            Self::MissingKey { .. } => problem::MISSING_KEY,
            Self::InvalidKey(_) => problem::INVALID_KEY,
            Self::MissingPrincipal => problem::MISSING_PRINCIPAL,
            Self::AmbiguousPrincipal { .. } => problem::AMBIGUOUS_PRINCIPAL,
            Self::InvalidToken(_) => problem::INVALID_TOKEN,
            Self::BodyTooLarge { .. } | Self::DecodedBodyTooLarge { .. } => problem::BODY_TOO_LARGE,
            Self::BodyUnreadable => problem::BODY_UNREADABLE,
            Self::RequestInFlight { .. } => problem::REQUEST_IN_FLIGHT,
            Self::FingerprintMismatch { .. } => problem::FINGERPRINT_MISMATCH,
            Self::PreviousAttemptFailed => problem::PREVIOUS_ATTEMPT_FAILED,
            Self::PreviousAttemptReleased { .. } => problem::PREVIOUS_ATTEMPT_RELEASED,
            Self::ResponseNotKept { .. } => problem::RESPONSE_NOT_KEPT,
            Self::OutcomeUnknown => problem::OUTCOME_UNKNOWN,
            Self::RecordCorrupt => problem::RECORD_CORRUPT,
            Self::StoreUnavailable => problem::STORE_UNAVAILABLE,
            Self::UpstreamResponseFailed => problem::UPSTREAM_RESPONSE_FAILED,
            Self::UpstreamUnreachable => problem::UPSTREAM_UNREACHABLE,
            Self::UpstreamFailed | Self::UpstreamHeadTooLarge => problem::UPSTREAM_FAILED,
            Self::UpstreamTimeout => problem::UPSTREAM_TIMEOUT,
            Self::OperationPanicked => problem::OPERATION_PANICKED,
            Self::Internal => problem::INTERNAL,
            Self::PrincipalLimited { .. } => problem::PRINCIPAL_LIMITED,
            Self::AmbiguousPath(_) | Self::AmbiguousRoute { .. } => problem::AMBIGUOUS_PATH,
            Self::PathTooLong { .. } => problem::PATH_TOO_LONG,
            Self::NoSuchRoute => problem::NO_SUCH_ROUTE,
            Self::AmbiguousMethod { .. }
            | Self::AmbiguousRequest { .. }
            | Self::OverrideHeader { .. } => problem::AMBIGUOUS_REQUEST,
        }
    }

    /// The HTTP status of this answer: its problem type's, or the route's configured
    /// status for a fingerprint mismatch.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::FingerprintMismatch { status } => *status,
            Self::PreviousAttemptReleased { status, .. } => *status,
            _ => StatusCode::from_u16(self.problem_type().status)
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        }
    }

    /// The anchor of this error's section in `docs/errors.md`.
    pub fn anchor(&self) -> &'static str {
        self.problem_type().anchor
    }

    /// The problem's `title`: the same for every occurrence of the type.
    pub fn title(&self) -> &'static str {
        self.problem_type().title
    }

    /// Builds the `application/problem+json` response with base URI `type_base` (see
    /// [`crate::policy::DEFAULT_PROBLEM_BASE`]). With feature `axum`, a handler can return
    /// the rejection itself (`IntoResponse`, the default base); this inherent method takes
    /// precedence in method-call syntax, so call the trait's as
    /// `IntoResponse::into_response(rejection)`.
    pub fn into_response(self, type_base: &str) -> Response<BoxBody> {
        // RFC 9457: `type` is the problem type's URI under `type_base`.
        let (kind, status) = (self.problem_type(), self.status());
        let body = serde_json::json!({
            "type": kind.type_uri(type_base),
            "title": kind.title,
            "status": status.as_u16(),
            "detail": self.detail(),
        });
        let bytes = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
        let mut resp = Response::new(crate::body::full(bytes));
        *resp.status_mut() = status;
        let headers = resp.headers_mut();
        let problem_json = HeaderValue::from_static("application/problem+json");
        headers.insert(CONTENT_TYPE, problem_json);
        let retry_after = match self {
            Self::RequestInFlight { retry_after_secs }
            | Self::PrincipalLimited {
                retry_after_secs, ..
            } => Some(retry_after_secs),
            Self::PreviousAttemptReleased {
                retry_after_secs, ..
            } => retry_after_secs,
            Self::StoreUnavailable => Some(1),
            _ => None,
        };
        if let Some(secs) = retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        if let Self::InvalidToken(_) = self {
            let challenge = HeaderValue::from_static("Bearer error=\"invalid_token\"");
            headers.insert(WWW_AUTHENTICATE, challenge);
        }
        resp
    }
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
mod detail;
mod token;

pub use token::TokenError;
