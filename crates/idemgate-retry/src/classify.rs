//! What an answer means for the logical request: final, or worth another attempt.

use std::time::Duration;

use http::{HeaderMap, StatusCode};

use crate::RetryPolicy;

/// The largest problem body read to find its `type`, in bytes.
pub(crate) const MAX_PROBLEM_BYTES: usize = 64 * 1024;

/// What to do after an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Hand this answer to the caller: the API's own answer (fresh or replayed), or one of
    /// idemgate's final problems (`outcome-unknown`, `previous-attempt-failed`,
    /// `fingerprint-mismatch`, ...).
    Final,
    /// Nothing new ran or the first attempt is still running: try again with the same key
    /// and body, after `Retry-After` when the answer gave one.
    Retry(Option<Duration>),
}

/// Whether an answer's body must be read to judge it: a problem (`application/problem+json`,
/// small, with a known length) with a status idemgate may retry or stop on.
pub(crate) fn needs_body(status: StatusCode, headers: &HeaderMap) -> bool {
    let problem = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/problem+json"));
    let small = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .is_some_and(|n| n <= MAX_PROBLEM_BYTES);
    problem && small && matches!(status.as_u16(), 409 | 429 | 502 | 503)
}

/// Judges an answer by its status, headers and (for problems) its `type`.
///
/// - A replay (`Idempotent-Replayed: true`) is final, whatever its status: an upstream's own
///   `409` or `503` that was stored is its answer.
/// - `409` is retried only when its type is idemgate's `request-in-flight`; `429` only for
///   `principal-limited`; `502` only for `upstream-unreachable` (the key was released).
/// - `503` is retried (idemgate's `store-unavailable`, or the API's own, which releases the
///   key).
/// - Everything else is final, among them `500` `outcome-unknown` and
///   `previous-attempt-failed`: the first attempt may have run, and retrying cannot tell.
pub fn judge(
    policy: &RetryPolicy,
    status: StatusCode,
    headers: &HeaderMap,
    body: Option<&[u8]>,
) -> Verdict {
    if headers
        .get("idempotent-replayed")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
    {
        return Verdict::Final;
    }
    let retry_after = headers
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let name = body
        .and_then(problem_type)
        .and_then(|t| policy.problem_name(&t).map(str::to_owned));
    let retry = matches!(
        (status.as_u16(), name.as_deref()),
        (409, Some("request-in-flight"))
            | (429, Some("principal-limited"))
            | (502, Some("upstream-unreachable"))
            | (503, _)
    );
    match retry {
        true => Verdict::Retry(retry_after),
        false => Verdict::Final,
    }
}

/// The `type` member of a problem details body (RFC 9457 §3.1.1).
fn problem_type(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.get("type")?.as_str().map(str::to_owned)
}
