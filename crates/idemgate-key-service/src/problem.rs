//! Errors as RFC 9457 problem details (`application/problem+json`), each `type` an anchor of
//! `docs/errors.md`, and the JSON body extractor that names the field at fault.

use axum::extract::{FromRequest, Request};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use http::{HeaderValue, StatusCode};
use idemgate_client::wire::Problem;
use idemgate_core::problem::{self, ProblemType};
use serde::de::DeserializeOwned;

/// An error answer of the key service: a problem type of the catalogue every front door
/// shares ([`idemgate_core::problem`]), with its `detail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    kind: ProblemType,
    status: StatusCode,
    detail: String,
    field: Option<String>,
}

impl ApiError {
    /// `400 invalid-request`: `field` breaks a rule (`detail` says which).
    pub fn invalid(field: impl Into<String>, detail: impl Into<String>) -> Self {
        let field = field.into();
        let detail = format!("{field}: {}", detail.into());
        Self {
            field: Some(field),
            ..Self::new(problem::INVALID_REQUEST, detail)
        }
    }

    /// `413 request-too-large`.
    pub fn too_large() -> Self {
        Self::new(
            problem::REQUEST_TOO_LARGE,
            "the request body exceeds the service's limit (key_service.max_request_bytes)",
        )
    }

    /// `401 unauthorized`: no bearer token, or one no client has.
    pub fn unauthorized() -> Self {
        Self::new(
            problem::UNAUTHORIZED,
            "send `Authorization: Bearer <token>` with a token configured in [[key_service.clients]]",
        )
    }

    /// `403 namespace-forbidden`.
    pub fn forbidden(what: &str) -> Self {
        Self::new(
            problem::NAMESPACE_FORBIDDEN,
            format!("{what} needs an admin client"),
        )
    }

    /// `409 lease-lost`: the lease is stale or unknown; nothing was changed.
    pub fn lease_lost() -> Self {
        Self::new(
            problem::LEASE_LOST,
            "this lease no longer holds the record (taken over, completed, failed, released or expired); nothing was changed",
        )
    }

    /// `404 record-not-found`.
    pub fn not_found() -> Self {
        Self::new(
            problem::RECORD_NOT_FOUND,
            "there is no live record for this scope, principal and key",
        )
    }

    /// `500 record-corrupt`: the record fails validation; it is never replayed.
    pub fn corrupt() -> Self {
        Self::new(
            problem::RECORD_CORRUPT,
            "the stored record fails validation; it is kept for inspection and never replayed. Do not run the operation on this key",
        )
    }

    /// `503 store-unavailable`: nothing was changed or run; retry later.
    pub fn unavailable() -> Self {
        Self::new(
            problem::STORE_UNAVAILABLE,
            "the key service's store did not answer in time or failed; do not run the operation, retry the call",
        )
    }

    fn new(kind: ProblemType, detail: impl Into<String>) -> Self {
        Self {
            kind,
            status: StatusCode::from_u16(kind.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            detail: detail.into(),
            field: None,
        }
    }

    /// The same problem with another status (`404`/`405` for unknown endpoints).
    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        if status == StatusCode::NOT_FOUND || status == StatusCode::METHOD_NOT_ALLOWED {
            self.kind = problem::UNKNOWN_ENDPOINT;
        }
        self
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The `docs/errors.md` anchor.
    pub fn anchor(&self) -> &'static str {
        self.kind.anchor
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Problem {
            type_: self.kind.type_uri(problem::DEFAULT_BASE),
            title: self.kind.title.into(),
            status: self.status.as_u16(),
            detail: self.detail,
            field: self.field,
        };
        let extra = match self.status {
            StatusCode::UNAUTHORIZED => Some((WWW_AUTHENTICATE, "Bearer realm=\"idemgate\"")),
            StatusCode::SERVICE_UNAVAILABLE => Some((RETRY_AFTER, "1")),
            _ => None,
        };
        let mut resp = (self.status, axum::Json(body)).into_response();
        let problem_json = (CONTENT_TYPE, "application/problem+json");
        for (name, value) in std::iter::once(problem_json).chain(extra) {
            resp.headers_mut()
                .insert(name, HeaderValue::from_static(value));
        }
        resp
    }
}

/// A JSON body: `400 invalid-request` naming the field for bad JSON, unknown or missing
/// fields and wrong types; `413 request-too-large` over the body limit.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = match Bytes::from_request(req, state).await {
            Ok(b) => b,
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                return Err(ApiError::too_large())
            }
            Err(_) => return Err(ApiError::invalid("body", "the body could not be read")),
        };
        parse_json(&bytes).map(JsonBody)
    }
}

/// Parses `bytes` as a `T`, naming the field of the first error.
///
/// # Errors
/// `400 invalid-request` with `field` the path (`lease.fence`), the unknown or missing
/// field, or `body` for JSON that does not parse.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let message = inner.to_string();
        let named = ["unknown field `", "missing field `"]
            .iter()
            .find_map(|p| message.strip_prefix(p))
            .and_then(|rest| rest.split('`').next());
        let field = match (named, path.as_str()) {
            (Some(name), "." | "" | "?") => name.to_owned(),
            // An unknown field is in the path already; a missing one is not.
            (Some(name), p) if p == name || p.ends_with(&format!(".{name}")) => p.to_owned(),
            (Some(name), parent) => format!("{parent}.{name}"),
            (None, "." | "" | "?") => "body".to_owned(),
            (None, p) => p.to_owned(),
        };
        match inner.classify() {
            // The body is not JSON at all: no field can be blamed.
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                ApiError::invalid("body", format!("not valid JSON ({message})"))
            }
            _ => ApiError::invalid(field, message),
        }
    })
}

#[cfg(test)]
mod tests {
    use idemgate_client::wire::CompleteRequest;

    use super::parse_json;

    #[test]
    fn errors_name_the_field() {
        let field = |body: &str| {
            parse_json::<CompleteRequest>(body.as_bytes())
                .unwrap_err()
                .field
                .unwrap()
        };
        assert_eq!(field("{"), "body");
        assert_eq!(field(r#"{"scope":"a","extra":1}"#), "extra");
        assert_eq!(field(r#"{"scope":"a","principal":"p","key":"k"}"#), "lease");
        let bad = r#"{"scope":"a","principal":"p","key":"k","lease":{"token":"x","fence":"1"}}"#;
        assert_eq!(field(bad), "lease.fence");
        let unknown =
            r#"{"scope":"a","principal":"p","key":"k","lease":{"token":"x","fence":1,"x":2}}"#;
        assert_eq!(field(unknown), "lease.x");
    }
}
