//! The catalogue of problem answers (RFC 9457 problem details) that every front door of
//! idemgate gives: the tower layer and gateway
//! (`idemgate_tower::IdempotencyRejection`) and the key service. Each problem type is
//! listed once, with its status and title; its `type` URI is a base
//! ([`DEFAULT_BASE`] or a documentation URL) and the anchor of its section in
//! `docs/errors.md`, which explains it to clients.
//!
//! ```
//! use idemgate_core::problem::{self, DEFAULT_BASE};
//!
//! assert_eq!(problem::REQUEST_IN_FLIGHT.status, 409);
//! assert_eq!(
//!     problem::REQUEST_IN_FLIGHT.type_uri(DEFAULT_BASE),
//!     "urn:idemgate:problem:request-in-flight"
//! );
//! assert_eq!(
//!     problem::REQUEST_IN_FLIGHT.type_uri("https://example.com/errors"),
//!     "https://example.com/errors#request-in-flight"
//! );
//! ```

/// The default base of problem `type` URIs: `urn:idemgate:problem:`, so a `type` is
/// `urn:idemgate:problem:<anchor>`, a stable name (RFC 9457 §3.1.1 lets a type be a URN).
pub const DEFAULT_BASE: &str = "urn:idemgate:problem:";

/// One problem type: what every answer of that type has in common.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProblemType {
    /// The section of `docs/errors.md` that explains it, and the end of its `type` URI.
    pub anchor: &'static str,
    /// The HTTP status (a route may configure another for `fingerprint-mismatch`, and the
    /// key service answers `405` for `unknown-endpoint` on a known path).
    pub status: u16,
    /// The `title`: the same for every occurrence of the type (RFC 9457 §3.1.3).
    pub title: &'static str,
}

impl ProblemType {
    /// The `type` URI under `base`: `base` and the anchor when `base` ends with `:`
    /// (a URN), else `base#anchor` (a documentation URL).
    pub fn type_uri(&self, base: &str) -> String {
        type_uri(base, self.anchor)
    }
}

/// The `type` URI of `anchor` under `base`: `base` and the anchor when `base` ends with `:`
/// (a URN), else `base#anchor` (a documentation URL).
pub fn type_uri(base: &str, anchor: &str) -> String {
    match base.ends_with(':') {
        true => format!("{base}{anchor}"),
        false => format!("{base}#{anchor}"),
    }
}

macro_rules! catalogue {
    ($($(#[$doc:meta])* $name:ident = $status:literal, $anchor:literal, $title:literal;)*) => {
        $($(#[$doc])* pub const $name: ProblemType = ProblemType {
            anchor: $anchor,
            status: $status,
            title: $title,
        };)*
        /// Every problem type, in the order of `docs/errors.md`.
        pub const ALL: &[ProblemType] = &[$($name),*];
    };
}

catalogue! {
    /// The route requires a key and none was sent.
    MISSING_KEY = 400, "missing-key", "Idempotency key required";
    /// The key header breaks a syntax rule.
    INVALID_KEY = 400, "invalid-key", "Invalid idempotency key";
    /// A covered request carries no principal.
    MISSING_PRINCIPAL = 401, "missing-principal", "Authentication required";
    /// The principal header is repeated or a list.
    AMBIGUOUS_PRINCIPAL = 400, "ambiguous-principal", "Ambiguous principal";
    /// The bearer token a JWT principal comes from is refused.
    INVALID_TOKEN = 401, "invalid-token", "Invalid bearer token";
    /// The body (or its decoding) exceeds the route's limit.
    BODY_TOO_LARGE = 413, "body-too-large", "Request body too large";
    /// The body could not be read.
    BODY_UNREADABLE = 400, "body-unreadable", "Request body unreadable";
    /// The gateway's (or key service's) listener: the request head did not arrive within
    /// `header_read_timeout`, or the body stalled past `body_read_timeout`.
    REQUEST_TIMEOUT = 408, "request-timeout", "Request timeout";
    /// The first request with this key is still running.
    REQUEST_IN_FLIGHT = 409, "request-in-flight", "Request in progress";
    /// The key was used with a different request (`422`, or the route's status).
    FINGERPRINT_MISMATCH = 422, "fingerprint-mismatch", "Idempotency key reused with a different request";
    /// The first attempt with this key failed.
    PREVIOUS_ATTEMPT_FAILED = 500, "previous-attempt-failed", "Previous attempt failed";
    /// While this request waited for the first with its key, the first ended without running
    /// the operation (released: its status is this answer's) and was not run again within
    /// the wait.
    PREVIOUS_ATTEMPT_RELEASED = 503, "previous-attempt-released", "Previous attempt ended without running";
    /// The operation ran but its response was not kept.
    RESPONSE_NOT_KEPT = 410, "response-not-kept", "Response not kept";
    /// The first attempt may have run and its result was never recorded.
    OUTCOME_UNKNOWN = 500, "outcome-unknown", "Outcome unknown";
    /// The stored record fails validation; it is never replayed.
    RECORD_CORRUPT = 500, "record-corrupt", "Stored record corrupt";
    /// The store did not answer in time or failed; nothing ran.
    STORE_UNAVAILABLE = 503, "store-unavailable", "Idempotency store unavailable";
    /// The caller is over a per-principal limit.
    PRINCIPAL_LIMITED = 429, "principal-limited", "Too many requests from this caller";
    /// The path is spelled in a way servers read differently.
    AMBIGUOUS_PATH = 400, "ambiguous-path", "Ambiguous request path";
    /// The scope of an unmatched request is too long to store.
    PATH_TOO_LONG = 414, "path-too-long", "Request path too long";
    /// No route matches and such requests are refused.
    NO_SUCH_ROUTE = 404, "no-such-route", "No such route";
    /// A header, or the method's letter case, lets servers read the request differently.
    AMBIGUOUS_REQUEST = 400, "ambiguous-request", "Ambiguous request";
    /// The upstream could not be reached; nothing was sent.
    UPSTREAM_UNREACHABLE = 502, "upstream-unreachable", "Bad gateway";
    /// The upstream failed after the request was sent.
    UPSTREAM_FAILED = 502, "upstream-failed", "Bad gateway";
    /// The upstream's response broke off after its headers.
    UPSTREAM_RESPONSE_FAILED = 502, "upstream-response-failed", "Upstream response failed";
    /// The upstream did not answer in time.
    UPSTREAM_TIMEOUT = 504, "upstream-timeout", "Upstream timeout";
    /// The operation panicked while it ran.
    OPERATION_PANICKED = 500, "operation-panicked", "Operation failed";
    /// An internal failure; nothing is known to have run.
    INTERNAL = 500, "internal", "Internal error";
    /// Key service: a field of the call breaks a rule.
    INVALID_REQUEST = 400, "invalid-request", "Invalid request";
    /// Key service: the call's body exceeds the service's limit.
    REQUEST_TOO_LARGE = 413, "request-too-large", "Request too large";
    /// Key service: no bearer token, or one no client has.
    UNAUTHORIZED = 401, "unauthorized", "Unauthorized";
    /// Key service: the call needs an admin client.
    NAMESPACE_FORBIDDEN = 403, "namespace-forbidden", "Forbidden";
    /// Key service: the lease no longer holds the record; nothing was changed.
    LEASE_LOST = 409, "lease-lost", "Lease lost";
    /// Key service: no live record for this scope, principal and key.
    RECORD_NOT_FOUND = 404, "record-not-found", "No record";
    /// Key service: no such endpoint (`404`), or not with this method (`405`).
    UNKNOWN_ENDPOINT = 404, "unknown-endpoint", "Unknown endpoint";
}

#[cfg(test)]
mod tests {
    use super::ALL;

    /// Every problem type has its section in docs/errors.md, and every section is one.
    #[test]
    fn the_catalogue_is_docs_errors_md() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/errors.md");
        let doc = std::fs::read_to_string(path).unwrap();
        let sections: Vec<&str> = doc.lines().filter_map(|l| l.strip_prefix("## ")).collect();
        let mut anchors: Vec<&str> = ALL.iter().map(|p| p.anchor).collect();
        let mut documented = sections.clone();
        anchors.sort_unstable();
        documented.sort_unstable();
        assert_eq!(anchors, documented, "catalogue vs docs/errors.md sections");
        assert!(ALL.iter().all(|p| (400..600).contains(&p.status)));
    }
}
