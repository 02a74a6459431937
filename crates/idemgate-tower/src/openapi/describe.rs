//! The pieces of the contract: the key parameter, the problem responses, the response
//! headers and the `x-idempotency` extension of one route, and the shared components.

use std::collections::BTreeMap;

use idemgate_core::problem;
use serde_json::{json, Value};
use utoipa::openapi::extensions::{Extensions, ExtensionsBuilder};
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::{
    AllOfBuilder, Components, ComponentsBuilder, Content, ContentBuilder, Header, HeaderBuilder,
    ObjectBuilder, Ref, RefOr, Required, Response, ResponseBuilder, SchemaFormat, Type,
};

use crate::policy::{Policy, RoutePolicy, StoreResponse};
use crate::principal::PrincipalSource;

use super::Contract;

/// Name of the problem schema in `components/schemas`.
pub(super) const PROBLEM_SCHEMA: &str = "IdemgateProblem";
/// Names of the header components.
pub(super) const RETRY_AFTER: &str = "IdemgateRetryAfter";
pub(super) const REPLAYED: &str = "IdemgateIdempotentReplayed";
pub(super) const LIFETIME: &str = "IdemgateKeyLifetime";
pub(super) const REDACTED: &str = "IdemgateIdempotentRedacted";
pub(super) const BODY_OMITTED: &str = "IdemgateIdempotentBodyOmitted";

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
    let mut up = true;
    let title = |c: char| {
        let c = if up { c.to_ascii_uppercase() } else { c };
        up = c == '-';
        c
    };
    name.chars().map(title).collect()
}

/// The shared components: the problem schema and the headers.
pub(super) fn components() -> Components {
    let string = || ObjectBuilder::new().schema_type(Type::String);
    let integer = |min: i32| {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(min))
    };
    let about =
        "An RFC 9457 problem details object. Branch on `type`, never on `title` or `detail`.";
    let kind =
        "The problem type: the base (`problem_type_base`) and a section name of docs/errors.md.";
    let uri = SchemaFormat::Custom("uri-reference".into());
    let problem = ObjectBuilder::new()
        .description(Some(about))
        .required("type")
        .required("title")
        .required("status")
        .property("type", string().format(Some(uri)).description(Some(kind)))
        .property("title", string())
        .property("status", integer(100).maximum(Some(599)))
        .property("detail", string())
        .property("instance", string());
    let mut components = ComponentsBuilder::new().schema(PROBLEM_SCHEMA, problem);
    for (name, required, schema, description) in [
        (
            RETRY_AFTER,
            true,
            integer(0),
            "Seconds to wait before retrying with the same key (delta-seconds, RFC 9110 §10.2.3).",
        ),
        (
            REPLAYED,
            false,
            string().enum_values(Some(["true"])),
            "`true` on a response replayed from the stored record: the operation ran once, before this request. Absent on the first (fresh) response.",
        ),
        (
            REDACTED,
            false,
            string().enum_values(Some(["true"])),
            "`true` on a replay whose body was stored with values redacted (the route's `store_response = \"redacted\"`): each redacted value reads `\"[redacted]\"`; the first response had them. No `ETag` or digest of the original body is replayed with it.",
        ),
        (
            BODY_OMITTED,
            false,
            string().enum_values(Some(["true"])),
            "`true` on a replay of a response stored without its body (`store_response = \"status-only\"`, or a `\"redacted\"` route's body that was not JSON or was compressed): the status and headers are the first response's, the body is empty.",
        ),
        (
            LIFETIME,
            false,
            integer(1),
            "How long the record of this idempotency key is kept, in seconds from the key's first request (the route's record TTL): retries within it get the stored response. Sent on fresh and replayed keyed responses when the route enables it.",
        ),
    ] {
        // utoipa 6's `Header` has no `required`; its extensions are written as they are.
        let required = required.then(|| Extensions::from_iter([("required", true)]));
        let header = HeaderBuilder::new()
            .description(Some(description))
            .schema(Some(schema))
            .extensions(required);
        components = components.header(name, header.build());
    }
    components.build()
}

/// The key header parameter of a route.
pub(super) fn key_parameter(policy: &Policy, route: &RoutePolicy) -> Parameter {
    let (min, max) = policy.key_len;
    let required = if route.key_required {
        "Required: a request without it gets `400` `missing-key`."
    } else {
        "Optional: a request without it is forwarded as it is, with no protection against duplicates."
    };
    ParameterBuilder::new()
        .name(header_title(policy.header_name.as_str()))
        .parameter_in(ParameterIn::Header)
        .required(if route.key_required { Required::True } else { Required::False })
        .description(Some(format!(
            "A unique key per logical operation (a UUID v4), sent again unchanged on every retry of that operation; the first request runs once and retries get its stored response. {required} {min} to {max} printable ASCII characters, compared byte for byte; an RFC 8941 sf-string (`\"...\"`) is accepted too and unquoted first. Records are scoped to the caller, the route and the key. See {DRAFT}."
        )))
        .schema(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(min))
                .max_length(Some(max))
                .pattern(Some(KEY_PATTERN)),
        ))
        .example(Some("5d1c3f0e-8a2b-4c6d-9e7f-0a1b2c3d4e5f".into()))
        .build()
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
    if route.plan().waits() {
        // Answers with the status the first request got; 503 is the usual one.
        kinds.push(problem::PREVIOUS_ATTEMPT_RELEASED);
    }
    // A mismatch answers with the route's status.
    let mismatch = (
        route.mismatch_status.as_u16(),
        problem::FINGERPRINT_MISMATCH.anchor,
    );
    let mut by_status = BTreeMap::<u16, Vec<&'static str>>::new();
    for (status, anchor) in kinds.iter().map(|k| (k.status, k.anchor)).chain([mismatch]) {
        by_status.entry(status).or_default().push(anchor);
    }
    by_status.into_iter().collect()
}

/// The problem+json media type of `anchors`, its schema naming their `type` URIs.
fn problem_media(policy: &Policy, anchors: &[&str]) -> Content {
    let types = anchors
        .iter()
        .map(|a| problem::type_uri(&policy.problem_type_base, a));
    let named = ObjectBuilder::new().property(
        "type",
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(types)),
    );
    let schema = AllOfBuilder::new()
        .item(Ref::from_schema_name(PROBLEM_SCHEMA))
        .item(named);
    ContentBuilder::new().schema(Some(schema)).build()
}

/// What a status of idemgate's own answers means for the client.
fn status_note(status: u16) -> &'static str {
    match status {
        400 => "The request was refused before it ran; fix it before sending it again.",
        401 => "No caller (principal) to scope the key to, or a refused bearer token; nothing ran.",
        409 => "The first request with this key is still running; nothing new ran. Retry with the same key after `Retry-After`. On a route whose `x-idempotency.onInFlight` is `wait`, a duplicate first waits up to `maxWaitSeconds` for the first's outcome and gets what a retry after it would; `409` only when that wait ends.",
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
pub(super) fn problem_response(policy: &Policy, status: u16, anchors: &[&str]) -> Response {
    let description = format!(
        "idemgate: {} Problem types: {}.",
        status_note(status),
        anchors.join(", ")
    );
    // Marks a response idemgate wrote alone (never replayed), so a second merge leaves it.
    let mark = ExtensionsBuilder::new().add(PROBLEMS_MARK, anchors);
    let mut response = ResponseBuilder::new()
        .description(description)
        .content("application/problem+json", problem_media(policy, anchors))
        .extensions(Some(mark.build()))
        .build();
    let waits = [
        "request-in-flight",
        "previous-attempt-released",
        "store-unavailable",
        "principal-limited",
    ];
    let retry_after = anchors.iter().any(|a| waits.contains(a));
    if retry_after {
        response
            .headers
            .insert("Retry-After".into(), header_ref(RETRY_AFTER));
    }
    response
}

/// A reference to a header component.
fn header_ref(name: &str) -> RefOr<Header> {
    RefOr::Ref(Ref::new(format!("#/components/headers/{name}")))
}

/// The headers idemgate adds to the API's own (stored, replayable) responses of a route.
pub(super) fn replay_headers(route: &RoutePolicy) -> Vec<(&'static str, RefOr<Header>)> {
    let mut out = vec![("Idempotent-Replayed", header_ref(REPLAYED))];
    match route.store_response {
        StoreResponse::Full => {}
        StoreResponse::Redacted => {
            out.push(("Idempotent-Redacted", header_ref(REDACTED)));
            out.push(("Idempotent-Body-Omitted", header_ref(BODY_OMITTED)));
        }
        StoreResponse::StatusOnly => {
            out.push(("Idempotent-Body-Omitted", header_ref(BODY_OMITTED)))
        }
    }
    if route.record_ttl_header {
        out.push((
            crate::replay::IDEMPOTENCY_KEY_LIFETIME_TITLE,
            header_ref(LIFETIME),
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
        "storeResponse": route.store_response.as_str(),
        "redactedJsonPointers": route.redact_json_pointers,
        "scope": "principal, route and key",
        "fingerprint": {
            "covers": "method, path, query and body (JSON canonicalized: member order and whitespace do not count; numbers and strings as written)",
            "ignoredJsonPointers": route.ignore_json_pointers,
            "headers": route.fingerprint_headers.iter().map(|h| h.as_str()).collect::<Vec<_>>(),
            "mismatchStatus": route.mismatch_status.as_u16()
        },
        "retryFailed": route.retry_failed,
        "onInFlight": match route.plan().waits() {
            true => "wait",
            false => "conflict",
        },
        "maxWaitSeconds": route.plan().waits().then_some(route.max_wait.as_secs_f64()),
        "leaseTtlSeconds": route.lease_ttl.as_secs_f64(),
        "maxBodyBytes": route.max_body_bytes
    })
}
