//! The JSON bodies of the store primitives under `/v1/store/...`, one per
//! [`IdempotencyStore`](idemgate_core::IdempotencyStore) method, lossless: header values
//! and bodies are base64, fingerprints and tokens hex. The key service scopes every key by
//! the caller's namespace; the keys here are the caller's own.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use bytes::Bytes;
use idemgate_core::{
    Fingerprint, IdempotencyKey, IdempotencyRecord, Lease, LeaseToken, RecordState, ScopedKey,
    StoredResponse,
};
use serde::{Deserialize, Serialize};

#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// A record's identity as the caller sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StoreFingerprint {
    /// Algorithm version.
    pub version: u16,
    /// 64 hex digits.
    #[cfg_attr(feature = "openapi", schema(pattern = r"^[0-9a-f]{64}$"))]
    pub digest: String,
}

/// A lease, whole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
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
}

/// A record, lossless.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct TakeOverAnswer {
    /// The new lease.
    pub lease: Option<StoreLease>,
}

/// `POST /v1/store/renew`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RenewBody {
    /// The lease held.
    pub lease: StoreLease,
    /// In ms (1 to 3,600,000).
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 3600000))]
    pub lease_ttl_ms: u64,
}

/// The answer of `renew`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RenewAnswer {
    /// The new lease expiry, ms since the Unix epoch.
    pub expires_at: i64,
}

/// `POST /v1/store/complete`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CompleteBody {
    /// The lease held.
    pub lease: StoreLease,
    /// The response to store.
    pub response: StoreResponse,
}

/// `POST /v1/store/fail` and `POST /v1/store/release`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LeaseBody {
    /// The lease held.
    pub lease: StoreLease,
}

/// `POST /v1/store/get`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GetBody {
    /// The record to read.
    pub key: StoreKey,
}

/// The answer of `get`: `null` when there is no live record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct GetAnswer {
    /// The live record.
    pub record: Option<StoreRecord>,
}

/// `POST /v1/store/purge` (admin clients only).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PurgeBody {
    /// Most records deleted (1 to 100,000).
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 100000))]
    pub batch: u32,
}

/// The answer of `purge`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PurgeAnswer {
    /// Records deleted.
    pub purged: u64,
}

/// The answer of a write that returns nothing (`fail`, `release`, `complete`, `ping`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Done {
    /// Always true.
    pub ok: bool,
}

// === conversions ===

/// A token as 16 hex digits.
pub fn token_hex(t: LeaseToken) -> String {
    format!("{:016x}", t.0 as u64)
}

/// Parses [`token_hex`]'s output.
///
/// # Errors
/// When `s` is not exactly 16 hex digits.
pub fn parse_token(s: &str) -> Result<LeaseToken, String> {
    if s.len() != 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("must be 16 hex digits".into());
    }
    u64::from_str_radix(s, 16)
        .map(|v| LeaseToken(v as i64))
        .map_err(|e| e.to_string())
}

impl StoreKey {
    /// From a core key.
    pub fn from_core(k: &ScopedKey) -> Self {
        Self {
            principal: k.principal.clone(),
            route: k.route.clone(),
            key: k.key.as_str().to_owned(),
        }
    }

    /// To a core key (the key syntax checked).
    ///
    /// # Errors
    /// The key breaks a syntax rule.
    pub fn to_core(&self) -> Result<ScopedKey, String> {
        Ok(ScopedKey {
            principal: self.principal.clone(),
            route: self.route.clone(),
            key: IdempotencyKey::new(&self.key).map_err(|e| e.to_string())?,
        })
    }
}

impl StoreFingerprint {
    /// From a core fingerprint.
    pub fn from_core(f: &Fingerprint) -> Self {
        Self {
            version: f.version,
            digest: hex::encode(f.digest),
        }
    }

    /// To a core fingerprint.
    ///
    /// # Errors
    /// The digest is not 64 hex digits.
    pub fn to_core(&self) -> Result<Fingerprint, String> {
        let mut digest = [0u8; 32];
        hex::decode_to_slice(&self.digest, &mut digest).map_err(|_| "must be 64 hex digits")?;
        Ok(Fingerprint {
            version: self.version,
            digest,
        })
    }
}

impl StoreLease {
    /// From a core lease, with the key as the caller sees it.
    pub fn from_core(l: &Lease, key: StoreKey) -> Self {
        Self {
            key,
            fence: l.fence,
            token: token_hex(l.token),
            expires_at: l.expires_at,
        }
    }

    /// To a core lease for `key`.
    ///
    /// # Errors
    /// The token is malformed (the message names `token`).
    pub fn to_core(&self, key: ScopedKey) -> Result<Lease, String> {
        Ok(Lease {
            key,
            fence: self.fence,
            token: parse_token(&self.token).map_err(|e| format!("token: {e}"))?,
            expires_at: self.expires_at,
        })
    }
}

impl StoreResponse {
    /// From a core response.
    pub fn from_core(r: &StoredResponse) -> Self {
        Self {
            status: r.status,
            headers: r
                .headers
                .iter()
                .map(|(n, v)| (n.clone(), B64.encode(v)))
                .collect(),
            body_base64: B64.encode(&r.body),
            replayable: r.replayable,
        }
    }

    /// To a core response.
    ///
    /// # Errors
    /// A value or the body is not base64.
    pub fn to_core(&self) -> Result<StoredResponse, String> {
        let mut headers = Vec::with_capacity(self.headers.len());
        for (i, (n, v)) in self.headers.iter().enumerate() {
            let v = B64
                .decode(v)
                .map_err(|_| format!("headers[{i}]: not base64"))?;
            headers.push((n.clone(), Bytes::from(v)));
        }
        let body = B64
            .decode(&self.body_base64)
            .map_err(|_| "body_base64: not base64".to_owned())?;
        Ok(StoredResponse {
            status: self.status,
            headers,
            body: Bytes::from(body),
            replayable: self.replayable,
        })
    }
}

impl StoreRecord {
    /// From a core record, with the key as the caller sees it.
    pub fn from_core(r: &IdempotencyRecord, key: StoreKey) -> Self {
        Self {
            key,
            fingerprint: StoreFingerprint::from_core(&r.fingerprint),
            state: r.state.as_str().to_owned(),
            fence: r.fence,
            lease_token: r.lease_token.map(token_hex),
            lease_expires_at: r.lease_expires_at,
            created_at: r.created_at,
            completed_at: r.completed_at,
            expires_at: r.expires_at,
            response: r.response.as_ref().map(StoreResponse::from_core),
        }
    }

    /// To a core record for `key`.
    ///
    /// # Errors
    /// A field is malformed (the message names it).
    pub fn to_core(&self, key: ScopedKey) -> Result<IdempotencyRecord, String> {
        Ok(IdempotencyRecord {
            key,
            fingerprint: self
                .fingerprint
                .to_core()
                .map_err(|e| format!("fingerprint.digest: {e}"))?,
            state: RecordState::parse(&self.state)
                .ok_or_else(|| "state: must be in_progress, completed or failed".to_owned())?,
            fence: self.fence,
            lease_token: match &self.lease_token {
                Some(t) => Some(parse_token(t).map_err(|e| format!("lease_token: {e}"))?),
                None => None,
            },
            lease_expires_at: self.lease_expires_at,
            created_at: self.created_at,
            completed_at: self.completed_at,
            expires_at: self.expires_at,
            response: match &self.response {
                Some(r) => Some(r.to_core().map_err(|e| format!("response.{e}"))?),
                None => None,
            },
        })
    }
}
