//! The JSON bodies of the store primitives under `/v1/store/...`, one per
//! [`IdempotencyStore`](idemgate_core::IdempotencyStore) method, lossless: header values
//! and bodies are base64, fingerprints and tokens hex. The key service scopes every key by
//! the caller's namespace; the keys here are the caller's own.

wire_types! {
    /// A record's identity as the caller sees it.
    #[serde(deny_unknown_fields)]
    pub struct StoreKey {
        /// The principal (at most 1,024 bytes).
        pub principal: String,
        /// The route template (at most 1,024 bytes).
        pub route: String,
        /// The idempotency key (8–128 printable ASCII).
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[!-~][ -~]{6,126}[!-~]$"))]
        pub key: String,
    }

    /// A fingerprint: version and SHA-256 digest.
    #[serde(deny_unknown_fields)]
    pub struct StoreFingerprint {
        /// Algorithm version.
        pub version: u16,
        /// 64 hex digits.
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[0-9a-f]{64}$"))]
        pub digest: String,
    }

    /// A lease, whole.
    #[serde(deny_unknown_fields)]
    pub struct StoreLease {
        /// The record it owns.
        pub key: StoreKey,
        /// The fence.
        pub fence: i64,
        /// 16 hex digits.
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[0-9a-f]{16}$"))]
        pub token: String,
        /// ms since the Unix epoch (store clock).
        pub expires_at: i64,
    }

    /// A stored response, lossless.
    #[serde(deny_unknown_fields)]
    pub struct StoreResponse {
        /// HTTP status.
        pub status: u16,
        /// `[name, base64 value]` pairs in order.
        pub headers: Vec<(String, String)>,
        /// Base64.
        pub body_base64: String,
        /// False when the body was not kept.
        pub replayable: bool,
        /// The encryption key id (16 hex digits) of a response sealed by the gateway
        /// before it was sent (`idemgate_core::seal`): `headers` is then empty and the body
        /// holds the sealed form. Absent for a response in clear.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[0-9a-f]{16}$"))]
        pub sealed_by: Option<String>,
    }

    /// A record, lossless.
    #[serde(deny_unknown_fields)]
    pub struct StoreRecord {
        /// Identity.
        pub key: StoreKey,
        /// Fingerprint of the request that created it.
        pub fingerprint: StoreFingerprint,
        /// `in_progress`, `completed` or `failed`.
        pub state: String,
        /// The fence.
        pub fence: i64,
        /// The holder's token (16 hex digits) while `in_progress`.
        pub lease_token: Option<String>,
        /// ms since the Unix epoch.
        pub lease_expires_at: Option<i64>,
        /// ms since the Unix epoch.
        pub created_at: i64,
        /// ms since the Unix epoch.
        pub completed_at: Option<i64>,
        /// ms since the Unix epoch.
        pub expires_at: i64,
        /// Once `completed`.
        pub response: Option<StoreResponse>,
    }

    /// `POST /v1/store/insert_or_get`.
    #[serde(deny_unknown_fields)]
    pub struct InsertBody {
        /// The record to create.
        pub key: StoreKey,
        /// Its fingerprint.
        pub fingerprint: StoreFingerprint,
        /// The new lease's token (16 hex digits).
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[0-9a-f]{16}$"))]
        pub token: String,
        /// In ms (1 to 3,600,000).
        #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 3600000))]
        pub lease_ttl_ms: u64,
        /// In ms (1 to 2,592,000,000).
        #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 2592000000_u64))]
        pub record_ttl_ms: u64,
    }

    /// The answer of `insert_or_get`, by `outcome`.
    #[serde(tag = "outcome", rename_all = "snake_case")]
    pub enum InsertAnswer {
        /// The record is now `in_progress` under this lease.
        Inserted {
            /// The new lease.
            lease: StoreLease,
        },
        /// A live record exists, untouched.
        Existing {
            /// The record.
            record: StoreRecord,
            /// The store's clock, ms since the Unix epoch.
            now: i64,
        },
    }

    /// `POST /v1/store/take_over`.
    #[serde(deny_unknown_fields)]
    pub struct TakeOverBody {
        /// The record as read (compare-and-set on its fence, state, lease token and expiry).
        pub seen: StoreRecord,
        /// The new lease's token.
        #[cfg_attr(feature = "openapi", schema(pattern = r"^[0-9a-f]{16}$"))]
        pub token: String,
        /// In ms (1 to 3,600,000).
        #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 3600000))]
        pub lease_ttl_ms: u64,
    }

    /// The answer of `take_over`: `null` when the record changed since it was read.
    pub struct TakeOverAnswer {
        /// The new lease.
        pub lease: Option<StoreLease>,
    }

    /// `POST /v1/store/renew`.
    #[serde(deny_unknown_fields)]
    pub struct RenewBody {
        /// The lease held.
        pub lease: StoreLease,
        /// In ms (1 to 3,600,000).
        #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 3600000))]
        pub lease_ttl_ms: u64,
    }

    /// The answer of `renew`.
    pub struct RenewAnswer {
        /// The new lease expiry, ms since the Unix epoch.
        pub expires_at: i64,
    }

    /// `POST /v1/store/complete`.
    #[serde(deny_unknown_fields)]
    pub struct CompleteBody {
        /// The lease held.
        pub lease: StoreLease,
        /// The response to store.
        pub response: StoreResponse,
    }

    /// `POST /v1/store/fail` and `POST /v1/store/release`.
    #[serde(deny_unknown_fields)]
    pub struct LeaseBody {
        /// The lease held.
        pub lease: StoreLease,
    }

    /// `POST /v1/store/get`.
    #[serde(deny_unknown_fields)]
    pub struct GetBody {
        /// The record to read.
        pub key: StoreKey,
    }

    /// The answer of `get`: `null` when there is no live record.
    pub struct GetAnswer {
        /// The live record.
        pub record: Option<StoreRecord>,
    }

    /// `POST /v1/store/purge` (admin clients only).
    #[serde(deny_unknown_fields)]
    pub struct PurgeBody {
        /// Most records deleted (1 to 100,000).
        #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 100000))]
        pub batch: u32,
    }

    /// The answer of `purge`.
    pub struct PurgeAnswer {
        /// Records deleted.
        pub purged: u64,
    }

    /// The answer of a write that returns nothing (`fail`, `release`, `complete`, `ping`).
    #[derive(Default)]
    pub struct Done {
        /// Always true.
        pub ok: bool,
    }

    /// `POST /v1/store/announce`: a key event for the callers of `/v1/wait` in the same
    /// namespace (`idemgate_core::events::KeyEvent::encode`'s text).
    #[serde(deny_unknown_fields)]
    pub struct AnnounceBody {
        /// `w <key id>` or `r <key id> <lease id> <status> <retry-after ms or ->`.
        #[cfg_attr(feature = "openapi", schema(max_length = 90))]
        pub event: String,
    }

    /// `POST /v1/wait`: the key events of the caller's namespace after `after`, waiting up
    /// to `wait_ms` for one.
    #[serde(deny_unknown_fields)]
    pub struct WaitBody {
        /// The `cursor` of the previous answer; `null` to start (answered at once, with
        /// the current cursor and no events).
        pub after: Option<String>,
        /// How long to wait for an event, in ms (0 to 30,000).
        #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 30000))]
        pub wait_ms: u64,
    }

    /// The answer of `/v1/wait`.
    pub struct WaitAnswer {
        /// Where the next call starts (`after`).
        pub cursor: String,
        /// Events in the order they came, at most 256 (call again at once for more).
        pub events: Vec<String>,
        /// Events may have been lost since `after` (the service restarted, or kept fewer
        /// than came): read again every key you wait on.
        pub missed: bool,
    }
}

/// Longest `/v1/wait`, in ms.
pub const MAX_EVENT_WAIT_MS: u64 = 30_000;

mod convert;
pub use convert::{parse_token, token_hex};
