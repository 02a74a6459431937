//! The JSON bodies of the key service's public API (`/v1/acquire`, `/v1/renew`,
//! `/v1/complete`, `/v1/fail`, `/v1/release`, `/v1/records`). The field names are the
//! contract a client in any language is written against; unknown fields are refused.

/// Shortest lease a caller may ask for, in ms (1 s).
pub const MIN_LEASE_TTL_MS: u64 = 1_000;
/// Longest lease a caller may ask for, in ms (1 h).
pub const MAX_LEASE_TTL_MS: u64 = 3_600_000;
/// Shortest record TTL a caller may ask for, in ms (1 min).
pub const MIN_RECORD_TTL_MS: u64 = 60_000;
/// Longest record TTL a caller may ask for, in ms (30 days).
pub const MAX_RECORD_TTL_MS: u64 = 30 * 24 * 3_600_000;
/// Longest wait an acquire may ask for, in ms (1 min).
pub const MAX_WAIT_MS: u64 = 60_000;

wire_types! {
    /// `POST /v1/acquire`: ask for the right to run an operation once.
    #[derive(Default)]
    #[serde(deny_unknown_fields)]
    pub struct AcquireRequest {
        /// What the operation is, e.g. `POST /payments` (1–256 printable ASCII): a key used on
        /// one scope never replays on another.
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[!-~]([ -~]{0,254}[!-~])?$"))]
        pub scope: String,
        /// Who asks, e.g. `user-42` (1–256 printable ASCII): one principal never sees another's
        /// record.
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[!-~]([ -~]{0,254}[!-~])?$"))]
        pub principal: String,
        /// The idempotency key (8–128 printable ASCII, no leading or trailing space).
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[!-~][ -~]{6,126}[!-~]$"))]
        pub key: String,
        /// An opaque fingerprint the caller computed (1–128 printable ASCII). Give it or
        /// `request`, not both.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[!-~]([ -~]{0,126}[!-~])?$"))]
        pub fingerprint: Option<String>,
        /// The request, fingerprinted by the service with the gateway's algorithm.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub request: Option<RequestParts>,
        /// How long the lease lasts unless renewed, in ms (1,000 to 3,600,000). Defaults to
        /// 10,000.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "openapi", schema(minimum = 1000, maximum = 3600000))]
        pub lease_ttl_ms: Option<u64>,
        /// How long the record lives, in ms (60,000 to 2,592,000,000). Defaults to 24 h.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "openapi", schema(minimum = 60000, maximum = 2592000000_u64))]
        pub record_ttl_ms: Option<u64>,
        /// A caller-chosen attempt id (1–128 printable ASCII; use a random UUID): an acquire
        /// retried with the same id after a network timeout gets the same lease back instead
        /// of `in_flight`. Whoever knows it can take that lease, so keep it to the attempt.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[!-~]([ -~]{0,126}[!-~])?$"))]
        pub attempt: Option<String>,
        /// What a lapsed lease means: `unknown` (default: `outcome_unknown`), `takeover` (run
        /// again with a higher fence, `takeover: true`) or `fail` (`previous_failed`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub on_lease_expired: Option<LeaseExpired>,
        /// Whether a `failed` record may run again (as a takeover). Defaults to false.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub retry_failed: Option<bool>,
        /// How long to wait, in ms (0 to 60,000), when another attempt holds the key: the
        /// answer then comes when that attempt's outcome lands (`replay`,
        /// `previous_failed`, ...), or `run` when it released the key and this call acquired
        /// it, or `released` when it released the key and this call did not acquire it
        /// within the wait, or `in_flight` when the wait ends. Defaults to 0: `in_flight` at
        /// once.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 60000))]
        pub wait_ms: Option<u64>,
    }

    /// `on_lease_expired`.
    #[derive(Copy)]
    #[serde(rename_all = "snake_case")]
    pub enum LeaseExpired {
        /// `outcome_unknown`; the record is kept.
        Unknown,
        /// Run again with a higher fence.
        Takeover,
        /// `previous_failed`.
        Fail,
    }

    /// A request for the service to fingerprint (the gateway's algorithm, version 2).
    #[derive(Default)]
    #[serde(deny_unknown_fields)]
    pub struct RequestParts {
        /// HTTP method, e.g. `POST`.
        pub method: String,
        /// Concrete path, e.g. `/payments`.
        pub path: String,
        /// Raw query string without `?`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub query: Option<String>,
        /// `Content-Type`: `application/json` bodies are compared as canonical JSON (RFC 8785).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub content_type: Option<String>,
        /// The body, base64 (RFC 4648 §4, padded). Defaults to empty.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub body_base64: Option<String>,
    }

    /// The answer of `POST /v1/acquire` (`200`), by `decision`.
    #[serde(tag = "decision", rename_all = "snake_case")]
    pub enum AcquireResponse {
        /// Run the operation now, then `complete`, `fail` or `release` with this lease
        /// (renewing it while the operation takes longer than the lease).
        Run {
            /// Proof of ownership.
            lease: LeaseInfo,
            /// True when a lapsed lease or a failed record was taken over: the operation may
            /// have run before. On a retried attempt, true whenever the fence is above 1.
            takeover: bool,
        },
        /// The operation completed before: answer with its stored response.
        Replay {
            /// The stored response.
            response: ResponseParts,
        },
        /// Another attempt holds the key: wait and retry the acquire.
        InFlight {
            /// Suggested wait, in ms (at most 1,000).
            retry_after_ms: u64,
        },
        /// The key was used with another request (different fingerprint); the record is
        /// untouched.
        Mismatch,
        /// The first attempt failed after it may have run; use a new key.
        PreviousFailed,
        /// The first attempt's lease lapsed before it recorded an outcome: it may have run.
        OutcomeUnknown,
        /// The operation ran, but its response was not kept.
        NotKept {
            /// The status the first caller got.
            status: u16,
        },
        /// Only with `wait_ms`: while this call waited, the attempt holding the key released
        /// it (nothing ran), another waiting call acquired it or the wait ended first. Retry
        /// the acquire, not before `retry_after_ms`.
        Released {
            /// The status the releasing attempt answered its caller (`503` when it did not say).
            status: u16,
            /// Its `Retry-After`, in ms, if it had one.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            retry_after_ms: Option<u64>,
        },
    }

    /// A lease as handed out.
    #[serde(deny_unknown_fields)]
    pub struct LeaseInfo {
        /// Opaque token (16 hex digits).
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[0-9a-f]{16}$"))]
        pub token: String,
        /// Grows on every takeover; a stale fence is refused.
        pub fence: i64,
        /// When the lease lapses unless renewed, in ms since the Unix epoch (store clock).
        pub expires_at: i64,
    }

    /// A lease as presented: `token` and `fence` (an `expires_at` sent back is ignored).
    #[serde(deny_unknown_fields)]
    pub struct LeaseRef {
        /// The token from `acquire`.
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[0-9a-f]{16}$"))]
        pub token: String,
        /// The fence from `acquire`.
        pub fence: i64,
        /// Ignored.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub expires_at: Option<i64>,
    }

    /// A response to store or replay.
    #[derive(Default)]
    #[serde(deny_unknown_fields)]
    pub struct ResponseParts {
        /// HTTP status, 200–499 (what may be stored and replayed).
        #[cfg_attr(feature = "openapi", schema(minimum = 100, maximum = 599))]
        pub status: u16,
        /// Header fields in order, as `[name, value]` pairs. Defaults to none.
        #[serde(default)]
        pub headers: Vec<(String, String)>,
        /// The body, base64 (RFC 4648 §4, padded). Defaults to empty.
        #[serde(default)]
        pub body_base64: String,
    }

    /// `POST /v1/renew`.
    #[serde(deny_unknown_fields)]
    pub struct RenewRequest {
        /// As acquired.
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[!-~]([ -~]{0,254}[!-~])?$"))]
        pub scope: String,
        /// As acquired.
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[!-~]([ -~]{0,254}[!-~])?$"))]
        pub principal: String,
        /// As acquired.
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[!-~][ -~]{6,126}[!-~]$"))]
        pub key: String,
        /// The lease held.
        pub lease: LeaseRef,
        /// The new lease length from now, in ms (1,000 to 3,600,000). Defaults to 10,000.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "openapi", schema(minimum = 1000, maximum = 3600000))]
        pub lease_ttl_ms: Option<u64>,
    }

    /// `POST /v1/fail`.
    #[serde(deny_unknown_fields)]
    pub struct LeaseRequest {
        /// As acquired.
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[!-~]([ -~]{0,254}[!-~])?$"))]
        pub scope: String,
        /// As acquired.
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[!-~]([ -~]{0,254}[!-~])?$"))]
        pub principal: String,
        /// As acquired.
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[!-~][ -~]{6,126}[!-~]$"))]
        pub key: String,
        /// The lease held.
        pub lease: LeaseRef,
    }

    /// `POST /v1/release`: the operation did not run.
    #[serde(deny_unknown_fields)]
    pub struct ReleaseRequest {
        /// As acquired.
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[!-~]([ -~]{0,254}[!-~])?$"))]
        pub scope: String,
        /// As acquired.
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[!-~]([ -~]{0,254}[!-~])?$"))]
        pub principal: String,
        /// As acquired.
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[!-~][ -~]{6,126}[!-~]$"))]
        pub key: String,
        /// The lease held.
        pub lease: LeaseRef,
        /// The status the caller answered its own client, e.g. `429` or `503` (a final
        /// status, 200–599; default `503`): calls waiting on the key (`wait_ms`) that do not run it again get
        /// it as `released`'s `status`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "openapi", schema(minimum = 200, maximum = 599))]
        pub status: Option<u16>,
        /// The `Retry-After` the caller answered, in ms (at most a day): waiting calls do
        /// not acquire the key again before it, and get it as `released`'s `retry_after_ms`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 86400000))]
        pub retry_after_ms: Option<u64>,
    }

    /// `POST /v1/complete`.
    #[serde(deny_unknown_fields)]
    pub struct CompleteRequest {
        /// As acquired.
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[!-~]([ -~]{0,254}[!-~])?$"))]
        pub scope: String,
        /// As acquired.
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[!-~]([ -~]{0,254}[!-~])?$"))]
        pub principal: String,
        /// As acquired.
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[!-~][ -~]{6,126}[!-~]$"))]
        pub key: String,
        /// The lease held.
        pub lease: LeaseRef,
        /// The operation's response, replayed to retries.
        pub response: ResponseParts,
    }

    /// The answer of `renew` (`200`).
    pub struct RenewResponse {
        /// The lease with its new expiry.
        pub lease: LeaseInfo,
    }

    /// The answer of `complete`, `fail` and `release` (`200`).
    pub struct OutcomeResponse {
        /// `completed`, `failed`, `released`, or `left-to-lapse` (a release under a
        /// take-over's lease: nothing written, the key is taken over again once the lease
        /// lapses).
        pub state: String,
        /// True when this repeated an outcome that had already landed.
        pub repeated: bool,
    }

    /// The answer of `GET /v1/records` (`200`).
    pub struct RecordView {
        /// The namespace that owns the record.
        pub namespace: String,
        /// As acquired.
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[!-~]([ -~]{0,254}[!-~])?$"))]
        pub scope: String,
        /// As acquired.
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[!-~]([ -~]{0,254}[!-~])?$"))]
        pub principal: String,
        /// As acquired.
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[!-~][ -~]{6,126}[!-~]$"))]
        pub key: String,
        /// `in_progress`, `completed` or `failed`.
        pub state: String,
        /// Grows on every takeover.
        pub fence: i64,
        /// Fingerprint algorithm version.
        pub fingerprint_version: u16,
        /// ms since the Unix epoch.
        pub created_at: i64,
        /// ms since the Unix epoch, once `completed` or `failed`.
        pub completed_at: Option<i64>,
        /// ms since the Unix epoch; past it the record counts as absent.
        pub expires_at: i64,
        /// ms since the Unix epoch, while `in_progress`.
        pub lease_expires_at: Option<i64>,
        /// The stored response, once `completed`.
        pub response: Option<StoredView>,
    }

    /// A stored response as `GET /v1/records` shows it.
    pub struct StoredView {
        /// HTTP status.
        pub status: u16,
        /// Body size, in bytes.
        pub body_bytes: u64,
        /// False when the response was not kept (only its status was).
        pub replayable: bool,
        /// Header fields, with `body=true`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub headers: Option<Vec<(String, String)>>,
        /// The body, base64, with `body=true`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub body_base64: Option<String>,
    }

    /// An RFC 9457 problem (`application/problem+json`).
    pub struct Problem {
        /// `urn:idemgate:problem:<anchor>`; the anchors are the sections of `docs/errors.md`.
        #[serde(rename = "type")]
        pub type_: String,
        /// Short summary.
        pub title: String,
        /// HTTP status.
        pub status: u16,
        /// What went wrong and what to do.
        pub detail: String,
        /// The request field at fault (`lease.token`, `record_ttl_ms`), for `400`s.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub field: Option<String>,
    }
}

impl From<LeaseInfo> for LeaseRef {
    fn from(l: LeaseInfo) -> Self {
        Self {
            token: l.token,
            fence: l.fence,
            expires_at: None,
        }
    }
}

impl Problem {
    /// The anchor of `type` (after the last `:` or `#`).
    pub fn anchor(&self) -> &str {
        self.type_.rsplit([':', '#']).next().unwrap_or("")
    }
}
