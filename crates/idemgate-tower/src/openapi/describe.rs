//! The pieces of the contract: the key parameter, the problem responses, the response
//! headers and the `x-idempotency` extension of one route, and the shared components.

use idemgate_core::problem;
use serde_json::{json, Value};

use crate::policy::{Policy, RoutePolicy};
use crate::principal::PrincipalSource;

use super::Contract;

/// Name of the problem schema in `components/schemas`.
pub(super) const PROBLEM_SCHEMA: &str = "IdemgateProblem";
/// Names of the header components.
pub(super) const RETRY_AFTER: &str = "IdemgateRetryAfter";
pub(super) const REPLAYED: &str = "IdemgateIdempotentReplayed";
pub(super) const LIFETIME: &str = "IdemgateKeyLifetime";

/// The extension on the responses of idemgate's own answers: their problem names.
pub(super) const PROBLEMS_MARK: &str = "x-idemgate-problems";

/// A bare key: printable ASCII (RFC 8941 sf-string characters) without a comma or a double
/// quote, with no leading or trailing space.
const KEY_PATTERN: &str = r#"^[!#-+\--~]([ !#-+\--~]*[!#-+\--~])?$"#;

/// The draft every part of the contract follows.
pub(super) const DRAFT: &str =
    "https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/";

/// `idempotency-key` → `Idempotency-Key`, the usual spelling of a header name.
pub(super) fn header_title(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut c = part.chars();
            match c.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + c.as_str(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join("-")
}

/// The shared components: the problem schema and the headers.
pub(super) fn components() -> Value {
    json!({
        "schemas": {
            PROBLEM_SCHEMA: {
                "type": "object",
                "description": "An RFC 9457 problem details object. Branch on `type`, never on `title` or `detail`.",
                "required": ["type", "title", "status"],
                "properties": {
                    "type": {"type": "string", "format": "uri-reference", "description": "The problem type: the base (`problem_type_base`) and a section name of docs/errors.md."},
                    "title": {"type": "string"},
                    "status": {"type": "integer", "minimum": 100, "maximum": 599},
                    "detail": {"type": "string"},
                    "instance": {"type": "string"}
                }
            }
        },
        "headers": {
            RETRY_AFTER: {
                "description": "Seconds to wait before retrying with the same key (delta-seconds, RFC 9110 §10.2.3).",
                "required": true,
                "schema": {"type": "integer", "minimum": 0}
            },
            REPLAYED: {
                "description": "`true` on a response replayed from the stored record: the operation ran once, before this request. Absent on the first (fresh) response.",
                "schema": {"type": "string", "enum": ["true"]}
            },
            LIFETIME: {
                "description": "How long the record of this idempotency key is kept, in seconds from the key's first request (the route's record TTL): retries within it get the stored response. Sent on fresh and replayed keyed responses when the route enables it.",
                "schema": {"type": "integer", "minimum": 1}
            }
        }
    })
}

/// The key header parameter of a route.
pub(super) fn key_parameter(policy: &Policy, route: &RoutePolicy) -> Value {
    let (min, max) = policy.key_len;
    let required = if route.key_required {
        "Required: a request without it gets `400` `missing-key`."
    } else {
        "Optional: a request without it is forwarded as it is, with no protection against duplicates."
    };
    json!({
        "name": header_title(policy.header_name.as_str()),
        "in": "header",
        "required": route.key_required,
        "description": format!(
            "A unique key per logical operation (a UUID v4), sent again unchanged on every retry of that operation; the first request runs once and retries get its stored response. {required} {min} to {max} printable ASCII characters, compared byte for byte; an RFC 8941 sf-string (`\"...\"`) is accepted too and unquoted first. Records are scoped to the caller, the route and the key. See {DRAFT}."
        ),
        "schema": {"type": "string", "minLength": min, "maxLength": max, "pattern": KEY_PATTERN},
        "example": "5d1c3f0e-8a2b-4c6d-9e7f-0a1b2c3d4e5f"
    })
}

/// The problems one route can answer by itself, grouped by status, in status order.
pub(super) fn problems(
    contract: &Contract<'_>,
    route: &RoutePolicy,
) -> Vec<(u16, Vec<&'static str>)> {
    let mut kinds = vec![];
    if route.key_required {
        kinds.push(problem::MISSING_KEY);
    }
    kinds.push(problem::INVALID_KEY);
    if !matches!(
        route.principal,
        PrincipalSource::AuthorizationHash | PrincipalSource::AuthorizationHmac(_)
    ) {
        kinds.push(problem::AMBIGUOUS_PRINCIPAL);
    }
    kinds.push(problem::BODY_UNREADABLE);
    if !route.allow_anonymous {
        kinds.push(problem::MISSING_PRINCIPAL);
    }
    if matches!(route.principal, PrincipalSource::Jwt { .. }) {
        kinds.push(problem::INVALID_TOKEN);
    }
    kinds.extend([
        problem::REQUEST_IN_FLIGHT,
        problem::RESPONSE_NOT_KEPT,
        problem::BODY_TOO_LARGE,
    ]);
    if !route.limits.is_off() {
        kinds.push(problem::PRINCIPAL_LIMITED);
    }
    kinds.extend([
        problem::PREVIOUS_ATTEMPT_FAILED,
        problem::OUTCOME_UNKNOWN,
        problem::RECORD_CORRUPT,
        problem::INTERNAL,
        problem::UPSTREAM_RESPONSE_FAILED,
    ]);
    if contract.gateway {
        kinds.extend([
            problem::UPSTREAM_UNREACHABLE,
            problem::UPSTREAM_FAILED,
            problem::UPSTREAM_TIMEOUT,
        ]);
    }
    kinds.push(problem::STORE_UNAVAILABLE);
    // A mismatch answers with the route's status.
    let mismatch = (
        route.mismatch_status.as_u16(),
        problem::FINGERPRINT_MISMATCH.anchor,
    );
    let mut by_status: Vec<(u16, Vec<&'static str>)> = Vec::new();
    for (status, anchor) in kinds.iter().map(|k| (k.status, k.anchor)).chain([mismatch]) {
        match by_status.iter_mut().find(|(s, _)| *s == status) {
            Some((_, list)) => list.push(anchor),
            None => by_status.push((status, vec![anchor])),
        }
    }
    by_status.sort_by_key(|(s, _)| *s);
    by_status
}

/// The problem+json media type of `anchors`, its schema naming their `type` URIs.
pub(super) fn problem_media(policy: &Policy, anchors: &[&str]) -> Value {
    let types: Vec<String> = anchors
        .iter()
        .map(|a| problem::type_uri(&policy.problem_type_base, a))
        .collect();
    json!({
        "schema": {
            "allOf": [
                {"$ref": format!("#/components/schemas/{PROBLEM_SCHEMA}")},
                {"type": "object", "properties": {"type": {"type": "string", "enum": types}}}
            ]
        }
    })
}

/// What a status of idemgate's own answers means for the client.
fn status_note(status: u16) -> &'static str {
    match status {
        400 => "The request was refused before it ran; fix it before sending it again.",
        401 => "No caller (principal) to scope the key to, or a refused bearer token; nothing ran.",
        409 => "The first request with this key is still running; nothing new ran. Retry with the same key after `Retry-After`.",
        410 => "The operation ran once but its response was not stored; fetch the result instead of retrying.",
        413 => "The body is larger than the route accepts; nothing ran.",
        422 => "The key was already used with a different request (a client bug); nothing new ran.",
        429 => "This caller is over the route's limits; nothing ran. Retry with the same key after `Retry-After`.",
        500 => "The first attempt with this key may have run (`outcome-unknown`, `previous-attempt-failed`) or its stored result is damaged; it is never run again. Check the resource before using a new key.",
        502 => "The upstream failed; see the problem type for whether it may have run.",
        503 => "The idempotency store is unavailable; nothing ran. Retry with the same key after `Retry-After`.",
        504 => "The upstream did not answer in time; the operation may have run and its key is marked failed.",
        _ => "An answer of idemgate itself.",
    }
}

/// The response object of one status of idemgate's own answers.
pub(super) fn problem_response(policy: &Policy, status: u16, anchors: &[&str]) -> Value {
    let mut response = json!({
        "description": format!("idemgate: {} Problem types: {}.", status_note(status), anchors.join(", ")),
        "content": {"application/problem+json": problem_media(policy, anchors)},
        // Marks a response idemgate wrote alone (never replayed), so a second merge leaves it.
        PROBLEMS_MARK: anchors
    });
    let retry_after = anchors.iter().any(|a| {
        matches!(
            *a,
            "request-in-flight" | "store-unavailable" | "principal-limited"
        )
    });
    if retry_after {
        response["headers"] =
            json!({"Retry-After": {"$ref": format!("#/components/headers/{RETRY_AFTER}")}});
    }
    response
}

/// The headers idemgate adds to the API's own (stored, replayable) responses of a route.
pub(super) fn replay_headers(route: &RoutePolicy) -> Vec<(&'static str, Value)> {
    let mut out = vec![(
        "Idempotent-Replayed",
        json!({"$ref": format!("#/components/headers/{REPLAYED}")}),
    )];
    if route.record_ttl_header {
        out.push((
            crate::replay::IDEMPOTENCY_KEY_LIFETIME_TITLE,
            json!({"$ref": format!("#/components/headers/{LIFETIME}")}),
        ));
    }
    out
}

/// The `x-idempotency` extension of a route: the published policy (the draft's "resource
/// MUST publish its idempotency policy"), including the retention (record TTL).
pub(super) fn extension(policy: &Policy, route: &RoutePolicy, template: Option<&str>) -> Value {
    let ttl = route.record_ttl.as_secs();
    json!({
        "specification": DRAFT,
        "route": template,
        "header": header_title(policy.header_name.as_str()),
        "keyRequired": route.key_required,
        "keyMinLength": policy.key_len.0,
        "keyMaxLength": policy.key_len.1,
        "recordTtlSeconds": ttl,
        "keyLifetime": format!("PT{ttl}S"),
        "lifetimeHeader": route.record_ttl_header.then_some(crate::replay::IDEMPOTENCY_KEY_LIFETIME_TITLE),
        "replayHeader": "Idempotent-Replayed",
        "scope": "principal, route and key",
        "fingerprint": {
            "covers": "method, path, query and body (JSON canonicalized: member order and whitespace do not count; numbers and strings as written)",
            "ignoredJsonPointers": route.ignore_json_pointers,
            "headers": route.fingerprint_headers.iter().map(|h| h.as_str()).collect::<Vec<_>>(),
            "mismatchStatus": route.mismatch_status.as_u16()
        },
        "retryFailed": route.retry_failed,
        "leaseTtlSeconds": route.lease_ttl.as_secs_f64(),
        "maxBodyBytes": route.max_body_bytes
    })
}
