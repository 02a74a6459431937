//! One route's policy in the file ([`RouteConfig`]), and how it becomes a [`RoutePolicy`].

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, StatusCode};
use idemgate_core::LeaseExpiredPolicy;
use idemgate_tower::limits::{KeyRate, PrincipalLimits};
use idemgate_tower::{JwtVerifier, PrincipalSource, RoutePolicy, StatusPattern};
use serde::Deserialize;

use super::{duration, setting};

/// One route's policy. In `[defaults]` every field applies to all routes; in `[[routes]]`
/// `route` is required and the other fields override the defaults.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Route template, e.g. `POST /accounts/{id}/refunds` (only in `[[routes]]`).
    pub route: Option<String>,
    /// Reject requests without a key (`400`). Default false.
    pub key_required: Option<bool>,
    /// Record lifetime. Default `24h`.
    pub record_ttl: Option<String>,
    /// Lease of the first request, renewed every third of it. Default `10s`.
    pub lease_ttl: Option<String>,
    /// How long a record with an unreadable lease counts as in progress. Default `60s`.
    pub max_lease: Option<String>,
    /// `422` (default) or `400`.
    pub mismatch_status: Option<u16>,
    /// Upstream statuses stored and replayed. Default `["2xx", "3xx", "4xx"]`.
    pub store_statuses: Option<Vec<String>>,
    /// Upstream statuses that release the key. Default `["408", "425", "429", "503"]`.
    pub release_statuses: Option<Vec<String>>,
    /// Upstream statuses that fail the key. Default `["5xx"]`.
    pub fail_statuses: Option<Vec<String>>,
    /// JSON Pointers left out of the fingerprint. Default none.
    pub ignore_json_pointers: Option<Vec<String>>,
    /// Request headers included in the fingerprint. Default none.
    pub fingerprint_headers: Option<Vec<String>>,
    /// `"authorization"` (SHA-256 of the header, default), `"header:NAME"` or
    /// `"jwt:CLAIM"` (a claim of the verified bearer token; needs `[jwt]`).
    pub principal: Option<String>,
    /// Share one anonymous scope instead of `401`. Default false.
    pub allow_anonymous: Option<bool>,
    /// Forward unrecorded when the store is down. Default false.
    pub fail_open: Option<bool>,
    /// What a lapsed lease (a holder that died after forwarding) means: `"unknown"`
    /// (default: `500 outcome-unknown`, never run again), `"takeover"` (run again, marked
    /// `Idempotent-Takeover: true`; only for operations safe to repeat) or `"fail"`.
    pub lease_expired: Option<String>,
    /// Let a retry of a failed key run again. Default false.
    pub retry_failed: Option<bool>,
    /// Largest request body, in bytes. Default 1048576.
    pub max_body_bytes: Option<usize>,
    /// Largest decoded size of a `Content-Encoding: gzip` body, in bytes (`413` above).
    /// Default 4 × `max_body_bytes` (unset here, so it follows a route's own body limit).
    pub max_decoded_body_bytes: Option<usize>,
    /// Largest response body kept for replay, in bytes. Default 1048576.
    pub max_stored_response_bytes: Option<usize>,
    /// Response headers never replayed. Default `["set-cookie", "date"]`.
    pub replay_deny_headers: Option<Vec<String>>,
    /// Keyed requests of one principal on the route in flight at once; over it `429`.
    /// Default 0 (off).
    pub max_in_flight_per_principal: Option<u32>,
    /// New keys per second of one principal on the route (a token bucket; fractions
    /// allowed); over it `429`. Default 0 (off).
    pub new_keys_per_second_per_principal: Option<f64>,
    /// The bucket's size: new keys one principal may send at once. Default 0 (one second's
    /// worth of the rate, at least 1).
    pub new_keys_burst_per_principal: Option<u32>,
    /// Send `Idempotency-Key-Lifetime: <record_ttl in seconds>` on fresh and replayed keyed
    /// responses, so clients can read how long a key's record lives. Default false.
    pub record_ttl_header: Option<bool>,
    /// A path that differs from the route's template only by a trailing `/`: `"refuse"`
    /// (default: `400 ambiguous-path`) or `"same"` (this route). In `[defaults]`, for paths
    /// that match no route: refused, or scoped without the `/`.
    pub trailing_slash: Option<String>,
    /// An encoded `/` (`%2F`) in the path: `"refuse"` (default: `400 ambiguous-path`) or
    /// `"keep"` (a literal escape inside its segment, e.g. `group%2Fproject`).
    pub encoded_slash: Option<String>,
    /// Match the template ignoring letter case (for Express or ASP.NET upstreams); in
    /// `[defaults]`, the unmatched path is scoped in lower case. Default false.
    pub case_insensitive: Option<bool>,
}

impl RouteConfig {
    /// The built-in defaults, every field set.
    pub fn builtin() -> Self {
        let s = |v: &[&str]| Some(v.iter().map(|x| x.to_string()).collect());
        Self {
            route: None,
            key_required: Some(false),
            record_ttl: Some("24h".into()),
            lease_ttl: Some("10s".into()),
            max_lease: Some("60s".into()),
            mismatch_status: Some(422),
            store_statuses: s(&["2xx", "3xx", "4xx"]),
            release_statuses: s(&["408", "425", "429", "503"]),
            fail_statuses: s(&["5xx"]),
            ignore_json_pointers: Some(vec![]),
            fingerprint_headers: Some(vec![]),
            principal: Some("authorization".into()),
            allow_anonymous: Some(false),
            fail_open: Some(false),
            lease_expired: Some("unknown".into()),
            retry_failed: Some(false),
            max_body_bytes: Some(1 << 20),
            max_decoded_body_bytes: None,
            max_stored_response_bytes: Some(1 << 20),
            replay_deny_headers: s(&["set-cookie", "date"]),
            max_in_flight_per_principal: Some(0),
            new_keys_per_second_per_principal: Some(0.0),
            new_keys_burst_per_principal: Some(0),
            record_ttl_header: Some(false),
            trailing_slash: Some("refuse".into()),
            encoded_slash: Some("refuse".into()),
            case_insensitive: Some(false),
        }
    }

    /// `self` with every unset field taken from `base`.
    pub(super) fn or(&self, base: &RouteConfig) -> RouteConfig {
        macro_rules! pick { ($($f:ident),*) => { RouteConfig { $($f: self.$f.clone().or_else(|| base.$f.clone()),)* } } }
        pick!(
            route,
            key_required,
            record_ttl,
            lease_ttl,
            max_lease,
            mismatch_status,
            store_statuses,
            release_statuses,
            fail_statuses,
            ignore_json_pointers,
            fingerprint_headers,
            principal,
            allow_anonymous,
            fail_open,
            lease_expired,
            retry_failed,
            max_body_bytes,
            max_decoded_body_bytes,
            max_stored_response_bytes,
            replay_deny_headers,
            max_in_flight_per_principal,
            new_keys_per_second_per_principal,
            new_keys_burst_per_principal,
            record_ttl_header,
            trailing_slash,
            encoded_slash,
            case_insensitive
        )
    }
}

/// Builds a [`RoutePolicy`] from a fully merged [`RouteConfig`].
pub(super) fn route_policy(
    field: &str,
    c: &RouteConfig,
    jwt: &Jwt,
    errs: &mut Vec<String>,
) -> Option<RoutePolicy> {
    let before = errs.len();
    let d = RoutePolicy::default();
    let dur = |name: &str, v: &Option<String>, errs: &mut Vec<String>| {
        v.as_deref()
            .and_then(|v| duration(&format!("{field}.{name}"), v, errs))
    };
    let statuses = |name: &str, v: &Option<Vec<String>>, errs: &mut Vec<String>| {
        let mut out = Vec::new();
        for s in v.iter().flatten() {
            match StatusPattern::parse(s) {
                Ok(p) => out.push(p),
                Err(e) => errs.push(format!("{field}.{name}: {e}")),
            }
        }
        out
    };
    let headers = |name: &str, v: &Option<Vec<String>>, errs: &mut Vec<String>| {
        let mut out = Vec::new();
        for h in v.iter().flatten() {
            match HeaderName::from_bytes(h.as_bytes()) {
                Ok(n) => out.push(n),
                Err(_) => errs.push(format!("{field}.{name}: `{h}` is not a header name")),
            }
        }
        out
    };
    let record_ttl = dur("record_ttl", &c.record_ttl, errs).unwrap_or(d.record_ttl);
    let lease_ttl = dur("lease_ttl", &c.lease_ttl, errs).unwrap_or(d.lease_ttl);
    if lease_ttl < Duration::from_millis(30) {
        errs.push(format!("{field}.lease_ttl: must be at least 30ms"));
    }
    let max_lease = dur("max_lease", &c.max_lease, errs).unwrap_or(d.max_lease);
    // A record never expires under a live lease, so a TTL below the lease would be
    // stretched to the lease anyway: say so instead.
    if record_ttl <= lease_ttl {
        errs.push(format!(
            "{field}.record_ttl: must be longer than lease_ttl ({} <= {})",
            humantime::format_duration(record_ttl),
            humantime::format_duration(lease_ttl)
        ));
    }
    let mismatch_status = match c.mismatch_status {
        Some(422) | None => StatusCode::UNPROCESSABLE_ENTITY,
        Some(400) => StatusCode::BAD_REQUEST,
        Some(other) => {
            errs.push(format!(
                "{field}.mismatch_status: {other} is not 422 or 400"
            ));
            StatusCode::UNPROCESSABLE_ENTITY
        }
    };
    let principal = principal(field, c.principal.as_deref(), jwt, errs);
    let lease_expired = match c.lease_expired.as_deref() {
        None | Some("unknown") => LeaseExpiredPolicy::Unknown,
        Some("takeover") => LeaseExpiredPolicy::Takeover,
        Some("fail") => LeaseExpiredPolicy::Fail,
        Some(other) => {
            errs.push(format!(
                "{field}.lease_expired: `{other}` is not \"unknown\", \"takeover\" or \"fail\""
            ));
            LeaseExpiredPolicy::Unknown
        }
    };
    let pointers = c.ignore_json_pointers.clone().unwrap_or_default();
    for p in &pointers {
        if !p.starts_with('/') {
            errs.push(format!("{field}.ignore_json_pointers: `{p}` is not a JSON Pointer (RFC 6901), e.g. \"/client_ts\""));
        }
    }
    if c.max_decoded_body_bytes == Some(0) {
        errs.push(format!(
            "{field}.max_decoded_body_bytes: must be at least 1"
        ));
    }
    let max_stored = idemgate_core::integrity::MAX_STORED_RESPONSE_BYTES;
    if c.max_stored_response_bytes.is_some_and(|n| n > max_stored) {
        errs.push(format!(
            "{field}.max_stored_response_bytes: at most {max_stored} (256 MiB), the largest response every store keeps"
        ));
    }
    let policy = RoutePolicy {
        key_required: c.key_required.unwrap_or(d.key_required),
        record_ttl,
        lease_ttl,
        max_lease,
        mismatch_status,
        store_statuses: statuses("store_statuses", &c.store_statuses, errs),
        release_statuses: statuses("release_statuses", &c.release_statuses, errs),
        fail_statuses: statuses("fail_statuses", &c.fail_statuses, errs),
        ignore_json_pointers: pointers,
        fingerprint_headers: headers("fingerprint_headers", &c.fingerprint_headers, errs),
        principal,
        allow_anonymous: c.allow_anonymous.unwrap_or(d.allow_anonymous),
        fail_open: c.fail_open.unwrap_or(d.fail_open),
        lease_expired,
        retry_failed: c.retry_failed.unwrap_or(d.retry_failed),
        max_body_bytes: c.max_body_bytes.unwrap_or(d.max_body_bytes),
        max_decoded_body_bytes: c.max_decoded_body_bytes,
        max_stored_response_bytes: c
            .max_stored_response_bytes
            .unwrap_or(d.max_stored_response_bytes),
        replay_deny_headers: headers("replay_deny_headers", &c.replay_deny_headers, errs),
        limits: principal_limits(field, c, errs),
        record_ttl_header: c.record_ttl_header.unwrap_or(d.record_ttl_header),
        trailing_slash: setting(
            &format!("{field}.trailing_slash"),
            c.trailing_slash.as_deref(),
            errs,
        ),
        encoded_slash: setting(
            &format!("{field}.encoded_slash"),
            c.encoded_slash.as_deref(),
            errs,
        ),
        case_insensitive: c.case_insensitive.unwrap_or(d.case_insensitive),
    };
    (errs.len() == before).then_some(policy)
}

/// The `[jwt]` table as routes see it: absent, present but broken (already reported under
/// `jwt`), or its verifier.
#[derive(Debug)]
pub(super) enum Jwt {
    Absent,
    Broken,
    Ready(Arc<JwtVerifier>),
}

impl Jwt {
    pub(super) fn new(present: bool, verifier: Option<Arc<JwtVerifier>>) -> Self {
        match (present, verifier) {
            (_, Some(v)) => Self::Ready(v),
            (true, None) => Self::Broken,
            (false, None) => Self::Absent,
        }
    }
}

/// Parses `principal`: `authorization`, `header:NAME` or `jwt:CLAIM`.
fn principal(field: &str, p: Option<&str>, jwt: &Jwt, errs: &mut Vec<String>) -> PrincipalSource {
    let p = match p {
        None | Some("authorization") => return PrincipalSource::AuthorizationHash,
        Some(p) => p,
    };
    if let Some(claim) = p.strip_prefix("jwt:") {
        let claim = claim.trim();
        if claim.is_empty() || claim.contains(|c: char| c.is_whitespace() || c == ':') {
            errs.push(format!(
                "{field}.principal: `{p}` needs a claim name, e.g. \"jwt:sub\""
            ));
        }
        return match jwt {
            Jwt::Ready(verifier) => PrincipalSource::Jwt {
                claim: claim.to_owned(),
                verifier: verifier.clone(),
            },
            Jwt::Broken => PrincipalSource::AuthorizationHash,
            Jwt::Absent => {
                errs.push(format!("{field}.principal: `{p}` needs a [jwt] table with hs256_secret_file and/or jwks_file"));
                PrincipalSource::AuthorizationHash
            }
        };
    }
    match p
        .strip_prefix("header:")
        .map(|h| HeaderName::from_bytes(h.trim().as_bytes()))
    {
        Some(Ok(name)) => PrincipalSource::Header(name),
        _ => {
            errs.push(format!(
                "{field}.principal: `{p}` is not \"authorization\", \"header:NAME\" or \"jwt:CLAIM\""
            ));
            PrincipalSource::AuthorizationHash
        }
    }
}

/// The per-principal limits of a merged [`RouteConfig`] (0 turns a limit off).
fn principal_limits(field: &str, c: &RouteConfig, errs: &mut Vec<String>) -> PrincipalLimits {
    let rate = c.new_keys_per_second_per_principal.unwrap_or(0.0);
    let burst = c.new_keys_burst_per_principal.unwrap_or(0);
    let new_keys = if rate == 0.0 {
        if burst != 0 {
            errs.push(format!(
                "{field}.new_keys_burst_per_principal: {burst} has no effect without new_keys_per_second_per_principal (set both to 0 to turn the limit off)"
            ));
        }
        None
    } else if burst > 1_000_000 {
        errs.push(format!(
            "{field}.new_keys_burst_per_principal: {burst} is above 1000000"
        ));
        None
    } else {
        KeyRate::new(rate, burst)
            .map_err(|e| errs.push(format!("{field}.new_keys_per_second_per_principal: {e}")))
            .ok()
    };
    PrincipalLimits {
        max_in_flight: NonZeroU32::new(c.max_in_flight_per_principal.unwrap_or(0)),
        new_keys,
    }
}
