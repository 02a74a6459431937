//! The `408` answers (`request-timeout` problem): to a request head that did not arrive in
//! time, written on the connection itself (no request was parsed, so hyper has nothing to
//! answer), and to a request whose body stalled, as a response.

use std::time::{Duration, SystemTime};

use axum::body::Body;
use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_TYPE};
use http::{HeaderValue, Response, StatusCode};
use idemgate_core::problem::REQUEST_TIMEOUT;

use super::Limits;

const PROBLEM_JSON: &str = "application/problem+json";

/// The rendered answers of one listener.
#[derive(Debug)]
pub(crate) struct Answers {
    /// The head's status line and headers, up to (without) `Date`.
    head_prefix: Bytes,
    head_body: Bytes,
    body_problem: Bytes,
}

impl Answers {
    /// The answers with `type` under `type_base`, naming `limits`' timeouts.
    pub(crate) fn new(type_base: &str, limits: &Limits) -> Self {
        let head_body = problem(
            type_base,
            &format!(
                "The request head did not arrive within {} (header_read_timeout); the \
                 connection is closed. Nothing was run.",
                human(limits.header_read_timeout)
            ),
        );
        let body_problem = problem(
            type_base,
            &format!(
                "The request body stalled: no bytes for {} (body_read_timeout); the connection \
                 is closed. A request with an idempotency key was not forwarded.",
                human(limits.body_read_timeout)
            ),
        );
        let head_prefix = format!(
            "HTTP/1.1 408 Request Timeout\r\ncontent-type: {PROBLEM_JSON}\r\n\
             content-length: {}\r\nconnection: close\r\n",
            head_body.len()
        );
        Self {
            head_prefix: head_prefix.into(),
            head_body,
            body_problem,
        }
    }

    /// The whole HTTP/1.1 answer to a head that timed out, dated now.
    pub(crate) fn head_timeout(&self) -> Bytes {
        let date = httpdate::fmt_http_date(SystemTime::now());
        let mut out = Vec::with_capacity(self.head_prefix.len() + self.head_body.len() + 48);
        out.extend_from_slice(&self.head_prefix);
        out.extend_from_slice(format!("date: {date}\r\n\r\n").as_bytes());
        out.extend_from_slice(&self.head_body);
        out.into()
    }

    /// The response to a request whose body stalled; on HTTP/1 (`h1`) it closes the
    /// connection (the rest of the body is never read).
    pub(crate) fn body_timeout(&self, h1: bool) -> Response<Body> {
        let mut response = Response::new(Body::from(self.body_problem.clone()));
        *response.status_mut() = StatusCode::REQUEST_TIMEOUT;
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if h1 {
            headers.insert(CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

/// The problem body, as the layer writes its own (`type`, `title`, `status`, `detail`).
fn problem(type_base: &str, detail: &str) -> Bytes {
    let body = serde_json::json!({
        "type": REQUEST_TIMEOUT.type_uri(type_base),
        "title": REQUEST_TIMEOUT.title,
        "status": REQUEST_TIMEOUT.status,
        "detail": detail,
    });
    serde_json::to_vec(&body).unwrap_or_default().into()
}

fn human(d: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(d)
}
