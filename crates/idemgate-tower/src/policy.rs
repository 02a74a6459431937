//! Per-route policy: which requests are covered and how.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderName, Method, StatusCode};
use idemgate_core::engine::LeaseExpiredPolicy;
use idemgate_core::key::{DEFAULT_MAX_LEN, DEFAULT_MIN_LEN};
use idemgate_core::lifecycle::{InFlightPolicy, LifecycleConfig, RoutePlan};
pub use idemgate_core::redact::StoreResponse;

use crate::path::{EncodedSlash, ForwardPath, TrailingSlash, Unmatched};
use crate::principal::PrincipalSource;
use crate::template::parse_method;

mod de;
#[cfg(feature = "toml")]
mod file;
mod matching;
mod overrides;
mod setters;
mod status;

#[cfg(feature = "toml")]
pub use file::{KeyProblem, Principals, RouteEntry};
pub use matching::{Resolution, Resolved, MAX_SCOPE_ROUTE_BYTES};
pub use overrides::DEFAULT_OVERRIDE_HEADERS;

pub use status::{StatusAction, StatusPattern, StatusRules};

/// The knobs of one route. [`RoutePolicy::default`] gives the DESIGN.md defaults, and is
/// the only place they are written; each field deserializes from its configuration spelling
/// (the gateway's `[defaults]` and `[[routes]]` keys), a missing one keeping its default.
/// `principal` (it needs the keys of its source) and `limits` (three keys) are read by
/// [`Policy::from_toml`] instead.
///
/// ```
/// use std::time::Duration;
/// use http::StatusCode;
/// use idemgate_core::engine::LeaseExpiredPolicy;
/// use idemgate_tower::RoutePolicy;
///
/// let p = RoutePolicy::default();
/// assert!(!p.key_required);
/// assert_eq!(p.record_ttl, Duration::from_secs(24 * 3600));
/// assert_eq!(p.lease_ttl, Duration::from_secs(10));
/// assert_eq!(p.max_lease, Duration::from_secs(60));
/// assert_eq!(p.mismatch_status, StatusCode::UNPROCESSABLE_ENTITY);
/// assert_eq!(p.lease_expired, LeaseExpiredPolicy::Unknown);
/// assert!(!p.retry_failed);
/// assert_eq!(p.max_body_bytes, 1 << 20);
/// assert_eq!(p.max_decoded_body_bytes, None);
/// assert_eq!(p.max_stored_response_bytes, 1 << 20);
/// assert_eq!(p.replay_deny_headers, ["set-cookie", "date"]);
/// assert!(p.ignore_json_pointers.is_empty() && p.fingerprint_headers.is_empty());
/// assert!(!p.allow_anonymous && !p.fail_open && !p.record_ttl_header && !p.case_insensitive);
/// ```
#[derive(Clone, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct RoutePolicy {
    /// Reject requests without a key with `400`. Defaults to false.
    pub key_required: bool,
    /// Record lifetime (`expires_at` = creation + this). Defaults to 24 h.
    #[serde(with = "de::duration")]
    pub record_ttl: Duration,
    /// How long a dead holder blocks retries; renewed every third of it. Defaults to 10 s.
    #[serde(with = "de::duration")]
    pub lease_ttl: Duration,
    /// How long a record with no readable lease counts as in progress. Defaults to 60 s.
    #[serde(with = "de::duration")]
    pub max_lease: Duration,
    /// Status for a key reused with another request: `422` (default) or `400` (Stripe).
    #[serde(with = "de::mismatch_status")]
    pub mismatch_status: StatusCode,
    /// Statuses whose response is stored and replayed. Defaults to `2xx`, `3xx`, `4xx`
    /// ([`DEFAULT_STORE_STATUSES`](idemgate_core::status::DEFAULT_STORE_STATUSES), which
    /// says why). A `401` with `WWW-Authenticate` is released unless a list names `401`
    /// exactly ([`RoutePolicy::action_for`]).
    #[serde(with = "de::statuses")]
    pub store_statuses: Vec<StatusPattern>,
    /// Statuses that mean "nothing was done": the key is released. Defaults to `408`, `425`,
    /// `429`, `503` ([`DEFAULT_RELEASE_STATUSES`](idemgate_core::status::DEFAULT_RELEASE_STATUSES),
    /// which says why). Checked first.
    #[serde(with = "de::statuses")]
    pub release_statuses: Vec<StatusPattern>,
    /// Statuses that fail the record. Defaults to `5xx`
    /// ([`DEFAULT_FAIL_STATUSES`](idemgate_core::status::DEFAULT_FAIL_STATUSES), which says
    /// why). Anything matching no list fails too.
    #[serde(with = "de::statuses")]
    pub fail_statuses: Vec<StatusPattern>,
    /// JSON Pointers (RFC 6901) left out of the fingerprint. Defaults to none.
    #[serde(deserialize_with = "de::pointers")]
    pub ignore_json_pointers: Vec<String>,
    /// Request headers included in the fingerprint. Defaults to none.
    #[serde(with = "de::headers")]
    pub fingerprint_headers: Vec<HeaderName>,
    /// Where the principal comes from. Defaults to the `Authorization` hash.
    #[serde(skip)]
    pub principal: PrincipalSource,
    /// Requests without a principal share one anonymous scope instead of getting `401`.
    /// Defaults to false.
    pub allow_anonymous: bool,
    /// Forward unrecorded when the store is unreachable instead of answering `503`. Only for
    /// routes where a duplicate is harmless. Defaults to false.
    pub fail_open: bool,
    /// What a lapsed lease means (its holder crashed or lost the store after forwarding):
    /// `"unknown"` ([`LeaseExpiredPolicy::Unknown`], the default): retries get `500
    /// outcome-unknown`, never a second execution; `"takeover"`
    /// ([`LeaseExpiredPolicy::Takeover`]) runs the operation again (marked
    /// `Idempotent-Takeover: true`): only for operations that are safe to repeat, upstreams
    /// that dedupe on the forwarded key, or services that complete the key in their own
    /// business transaction. A take-over whose forward is answered "nothing done" (a
    /// release status) keeps the record, since the holder before it may have run: retries
    /// get `409` until its lease lapses, then take it over again, marked (never a fresh,
    /// unmarked run); `"fail"` ([`LeaseExpiredPolicy::Fail`]) answers as if the attempt
    /// failed.
    pub lease_expired: LeaseExpiredPolicy,
    /// Allow a retry of a failed record to run again. Defaults to false.
    pub retry_failed: bool,
    /// Largest request body, in bytes; above it `413`. Defaults to 1048576 (1 MiB).
    pub max_body_bytes: usize,
    /// Largest decoded size of an encoded (`Content-Encoding: gzip`) request body, in bytes;
    /// decoding for the fingerprint stops there and the request gets `413`, unforwarded.
    /// Unset (`None`, the default): 4 × `max_body_bytes`.
    #[serde(deserialize_with = "de::decoded_limit")]
    pub max_decoded_body_bytes: Option<usize>,
    /// Largest response body stored for replay, in bytes (at most 268435456, 256 MiB); above
    /// it the response is delivered whole but not replayable. Defaults to 1048576 (1 MiB).
    #[serde(deserialize_with = "de::stored_limit")]
    pub max_stored_response_bytes: usize,
    /// What is stored of a response kept for replay: `"full"` (the default: status,
    /// headers, body); `"redacted"`: the JSON body with the values `redact_json_pointers`
    /// name replaced by `"[redacted]"`, every other byte kept, and retries get
    /// `Idempotent-Redacted: true` (a body that is not JSON, has duplicate member names, is
    /// compressed or whose redacted form exceeds `max_stored_response_bytes` is stored as
    /// `"status-only"`); `"status-only"`: status and headers,
    /// and retries get an empty body and `Idempotent-Body-Omitted: true`. The first client
    /// always gets the whole response. A changed body is stored without `ETag`,
    /// `Content-Digest`, `Repr-Digest` and `Content-MD5`. See [`StoreResponse`].
    pub store_response: StoreResponse,
    /// JSON Pointers (RFC 6901) of the response body's values a `"redacted"` route does not
    /// store; a token `*` stands for every element of an array. Defaults to none.
    #[serde(deserialize_with = "de::pointers")]
    pub redact_json_pointers: Vec<String>,
    /// Response headers never replayed, in addition to hop-by-hop ones, `set-cookie` and
    /// `date` (never replayed whatever this says; a replay gets a fresh `Date`). Defaults to
    /// `set-cookie`, `date`.
    #[serde(with = "de::headers")]
    pub replay_deny_headers: Vec<HeaderName>,
    /// Per-principal limits (in flight, new keys per second). Defaults to off.
    #[serde(skip)]
    pub limits: crate::limits::PrincipalLimits,
    /// Send `Idempotency-Key-Lifetime: N`
    /// ([`IDEMPOTENCY_KEY_LIFETIME`](crate::replay::IDEMPOTENCY_KEY_LIFETIME), `N` the
    /// record TTL in whole seconds: how long retries with the key get the stored response,
    /// from the key's first request) on fresh and replayed keyed responses whose status is
    /// stored. Defaults to false.
    pub record_ttl_header: bool,
    /// The `Retry-After` of `409 request-in-flight` (RFC 9110 §10.2.3; whole seconds, rounded
    /// up, 1 s to 1 h): when a duplicate of a request that still runs should ask again.
    /// Raise it on slow operations so that retrying clients and meshes poll less. Defaults
    /// to 1 s.
    #[serde(with = "de::duration")]
    pub in_flight_retry_after: Duration,
    /// What a duplicate gets while the first request with its key still runs: `"conflict"`
    /// ([`InFlightPolicy::Conflict`], the default): `409 request-in-flight` at once; or
    /// `"wait"` ([`InFlightPolicy::Wait`]): it waits up to `max_wait` for the first's outcome
    /// and gets what a retry after it would: the stored response (replayed), or the first's
    /// error (`previous-attempt-failed`, `outcome-unknown`); when the first ends without
    /// running the operation (a status in `release_statuses`), one waiter runs it.
    pub on_in_flight: InFlightPolicy,
    /// How long a duplicate waits under `on_in_flight = "wait"` before it gets `409`; from
    /// 100 ms to the gateway's `upstream_timeout`. Defaults to 10 s.
    #[serde(with = "de::duration")]
    pub max_wait: Duration,
    /// What a path that differs from this route's template only by a trailing `/` means:
    /// `"refuse"` ([`TrailingSlash::Refuse`], the default): `400 ambiguous-path`; or
    /// `"same"` ([`TrailingSlash::Same`]): this route. On the default route: whether an unmatched path with a
    /// trailing `/` is refused or scoped without it. See [`Policy::resolve`].
    pub trailing_slash: TrailingSlash,
    /// What an encoded `/` (`%2F`) in a path this route matches means: `"refuse"`
    /// ([`EncodedSlash::Refuse`], the default): `400 ambiguous-path`; or `"keep"`
    /// ([`EncodedSlash::Keep`]): a literal escape inside its segment (`group%2Fproject`).
    pub encoded_slash: EncodedSlash,
    /// Match this route's template ignoring ASCII letter case (for upstreams that route so,
    /// e.g. Express and ASP.NET by default); on the default route, the concrete path of the
    /// scope is folded to lower case. Defaults to false.
    pub case_insensitive: bool,
}

impl Default for RoutePolicy {
    fn default() -> Self {
        // The lifecycle's settings are the core's defaults, written there.
        let plan = RoutePlan::default();
        Self {
            key_required: false,
            record_ttl: plan.record_ttl,
            lease_ttl: plan.lease_ttl,
            max_lease: plan.max_lease,
            mismatch_status: StatusCode::UNPROCESSABLE_ENTITY,
            store_statuses: idemgate_core::status::DEFAULT_STORE_STATUSES.to_vec(),
            release_statuses: idemgate_core::status::DEFAULT_RELEASE_STATUSES.to_vec(),
            fail_statuses: idemgate_core::status::DEFAULT_FAIL_STATUSES.to_vec(),
            ignore_json_pointers: Vec::new(),
            fingerprint_headers: Vec::new(),
            principal: PrincipalSource::default(),
            allow_anonymous: false,
            fail_open: false,
            lease_expired: plan.lease_expired,
            retry_failed: plan.retry_failed,
            max_body_bytes: 1 << 20,
            max_decoded_body_bytes: None,
            max_stored_response_bytes: 1 << 20,
            store_response: StoreResponse::Full,
            redact_json_pointers: Vec::new(),
            replay_deny_headers: vec![http::header::SET_COOKIE, http::header::DATE],
            limits: Default::default(),
            record_ttl_header: false,
            in_flight_retry_after: Duration::from_secs(1),
            on_in_flight: plan.on_in_flight,
            max_wait: plan.max_wait,
            trailing_slash: TrailingSlash::Refuse,
            encoded_slash: EncodedSlash::Refuse,
            case_insensitive: false,
        }
    }
}

impl RoutePolicy {
    /// What an upstream answer with `status` and `headers` does to the record, by the
    /// core's rules ([`StatusRules::action`]): a `401` with `WWW-Authenticate` is released
    /// unless a list names `401` exactly; then the release, fail and store lists; a status
    /// in none of them fails the record. `1xx` release the key (never stored); a `304`
    /// follows the lists like any `3xx`, and when stored it is kept as not replayable
    /// (retries get `410`), never released: the operation may have run.
    pub fn action_for(&self, status: StatusCode, headers: &HeaderMap) -> StatusAction {
        let challenge = status == StatusCode::UNAUTHORIZED && status::has_challenge(headers);
        self.status_rules().action(status.as_u16(), challenge)
    }

    /// This route's status lists as the core's [`StatusRules`].
    pub fn status_rules(&self) -> StatusRules<'_> {
        StatusRules {
            release: &self.release_statuses,
            fail: &self.fail_statuses,
            store: &self.store_statuses,
        }
    }

    /// The decoded-size limit of encoded bodies, in bytes: `max_decoded_body_bytes`, or
    /// 4 × `max_body_bytes` when unset.
    pub fn decoded_body_limit(&self) -> usize {
        self.max_decoded_body_bytes
            .unwrap_or_else(|| self.max_body_bytes.saturating_mul(4))
    }

    /// True when this route's duplicates wait (`on_in_flight = "wait"`) longer than `limit`.
    pub fn waits_longer_than(&self, limit: Duration) -> bool {
        self.plan().waits() && self.max_wait > limit
    }

    /// What the core lifecycle needs of this route: TTLs and the decision's knobs.
    pub fn plan(&self) -> RoutePlan {
        RoutePlan {
            lease_ttl: self.lease_ttl,
            record_ttl: self.record_ttl,
            lease_expired: self.lease_expired,
            retry_failed: self.retry_failed,
            max_lease: self.max_lease,
            on_in_flight: self.on_in_flight,
            max_wait: self.max_wait,
        }
    }
}

/// Errors building a [`Policy`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A route is not `METHOD /path/{param}`.
    #[error("route `{route}`: {reason}")]
    BadRoute {
        /// The route as written.
        route: String,
        /// What is wrong.
        reason: String,
    },
}

/// Which requests are covered, and the [`RoutePolicy`] of each.
///
/// Routes are templates such as `POST /accounts/{id}/refunds` (matchit syntax), matched
/// against the path in normal form ([`Policy::resolve`] says how). A covered request that
/// matches no template uses the default policy, scoped by its concrete path, or is refused
/// ([`Policy::unmatched`]).
#[derive(Clone, Debug)]
pub struct Policy {
    /// The key header. Defaults to `idempotency-key` (some APIs use `x-idempotency-key`).
    pub header_name: HeaderName,
    /// Methods covered. Defaults to `POST`, `PATCH`.
    pub methods: Vec<Method>,
    /// Key length bounds in characters. Defaults to 8 and 128.
    pub key_len: (usize, usize),
    /// Prefix of problem `type` URIs; the error's anchor is appended directly when it ends
    /// with `:` (a URN), else after `#` (a documentation URL).
    /// Defaults to [`DEFAULT_PROBLEM_BASE`].
    pub problem_type_base: String,
    /// Engine-wide settings: the store deadline (2 s) and the bound on pending outcome
    /// writes (1,024 writes, 64 MiB).
    pub lifecycle: LifecycleConfig,
    default_route: Arc<RoutePolicy>,
    /// The source [`Policy::with_principal`] set, for routes added after it.
    principal: Option<PrincipalSource>,
    /// What a covered request whose path matches no route gets: the default policy
    /// ([`Unmatched::Default`], the default) or `404 no-such-route` ([`Unmatched::Refuse`]).
    pub unmatched: Unmatched,
    /// The path a covered request is forwarded (and fingerprinted) with: as sent
    /// ([`ForwardPath::AsSent`], the default) or in normal form ([`ForwardPath::Normalised`]).
    pub forward_path: ForwardPath,
    /// Request headers that make some upstream run another path or method than the
    /// request line names (gunicorn's `SCRIPT_NAME`, method-override headers, ...): a
    /// covered request carrying one gets `400 ambiguous-request`, with or without a key,
    /// nothing stored or forwarded. Defaults to [`DEFAULT_OVERRIDE_HEADERS`], which says
    /// who reads each; empty when a proxy in front strips them.
    pub override_headers: Vec<HeaderName>,
    routes: Vec<(String, Arc<RoutePolicy>)>,
    matchers: HashMap<Method, matchit::Router<usize>>,
    /// The case-insensitive routes, by their templates in lower case.
    folded: HashMap<Method, matchit::Router<usize>>,
    /// Whether some route has [`TrailingSlash::Same`] (then a path a route matches as it
    /// is is checked against the routes its trailing-slash toggle reaches).
    trailing_same: bool,
}

/// The most parameters (`{name}`, `{*rest}`) a route template may have.
pub const MAX_ROUTE_PARAMS: usize = 16;

pub use idemgate_core::problem::DEFAULT_BASE as DEFAULT_PROBLEM_BASE;

impl Default for Policy {
    fn default() -> Self {
        Self {
            header_name: HeaderName::from_static("idempotency-key"),
            methods: vec![Method::POST, Method::PATCH],
            key_len: (DEFAULT_MIN_LEN, DEFAULT_MAX_LEN),
            default_route: Arc::default(),
            principal: None,
            problem_type_base: DEFAULT_PROBLEM_BASE.to_owned(),
            lifecycle: LifecycleConfig::default(),
            routes: Vec::new(),
            matchers: HashMap::new(),
            folded: HashMap::new(),
            trailing_same: false,
            unmatched: Unmatched::Default,
            forward_path: ForwardPath::AsSent,
            override_headers: DEFAULT_OVERRIDE_HEADERS.map(HeaderName::from_static).into(),
        }
    }
}

impl Policy {
    /// Adds a route such as `POST /accounts/{id}/refunds`. Its method is covered from now on.
    ///
    /// # Errors
    /// [`PolicyError::BadRoute`] for a malformed or duplicate template, one the router would
    /// not match as meant (`:id` or `*rest` instead of `{id}` or `{*rest}`, unbalanced braces),
    /// with the right spelling, or one with more than [`MAX_ROUTE_PARAMS`] parameters.
    ///
    /// A template whose literal text is not in normal form ([`crate::path`]: `/%63harges`,
    /// `//x`, `/a;b`) is refused too, with its normal spelling where it has one: requests
    /// are matched in normal form, so it would never match. With `case_insensitive`, two
    /// templates that differ only in letter case conflict.
    ///
    /// After [`Policy::with_principal`], a route whose `principal` is left at its default
    /// gets that source too.
    pub fn with_route(mut self, route: &str, mut policy: RoutePolicy) -> Result<Self, PolicyError> {
        let bad = |reason: String| PolicyError::BadRoute {
            route: route.to_owned(),
            reason,
        };
        let (method, path) = route
            .trim()
            .split_once(' ')
            .ok_or_else(|| bad("expected `METHOD /path`".into()))?;
        let method = parse_method(method).map_err(bad)?;
        let path = path.trim();
        if !path.starts_with('/') {
            return Err(bad("the path must start with `/`".into()));
        }
        crate::template::check(path).map_err(bad)?;
        let index = self.routes.len();
        self.insert_matcher(&method, path, index, &policy)
            .map_err(bad)?;
        if !self.methods.contains(&method) {
            self.methods.push(method.clone());
        }
        let inherits = policy.principal == PrincipalSource::default();
        if let Some(source) = self.principal.as_ref().filter(|_| inherits) {
            policy.principal = source.clone();
        }
        self.routes
            .push((format!("{method} {path}"), Arc::new(policy)));
        Ok(self)
    }

    /// Sets the policy of covered requests that match no route.
    pub fn with_default_route(mut self, policy: RoutePolicy) -> Self {
        self.default_route = Arc::new(policy);
        self
    }

    /// The policy of covered requests that match no route.
    pub fn default_route(&self) -> &RoutePolicy {
        &self.default_route
    }

    /// The routes configured, in order.
    pub fn routes(&self) -> impl Iterator<Item = (&str, &RoutePolicy)> {
        self.routes.iter().map(|(r, p)| (r.as_str(), &**p))
    }

    /// Sets the principal source ([`crate::principal`]) of the default policy, of every
    /// route added so far, and of routes added later that leave `principal` at its default.
    #[must_use]
    pub fn with_principal(mut self, source: PrincipalSource) -> Self {
        self.principal = Some(source.clone());
        Arc::make_mut(&mut self.default_route).principal = source.clone();
        for (_, policy) in &mut self.routes {
            Arc::make_mut(policy).principal = source.clone();
        }
        self
    }
}

#[cfg(test)]
mod tests;
