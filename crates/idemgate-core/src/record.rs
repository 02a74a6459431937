//! Records, their states, stored responses and leases.

use std::fmt;

use bytes::Bytes;

use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;

/// Milliseconds since the Unix epoch, by the store's clock.
pub type UnixMillis = i64;

/// The process's wall-clock time in ms since the Unix epoch: the clock of stores that run
/// in the process (memory, SQLite). Stores with a server use the server's clock instead.
pub fn now_millis() -> UnixMillis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// `d` in whole milliseconds, saturating at `i64::MAX`.
pub fn duration_ms(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// What identifies a record: (principal, route template, idempotency key). One caller can
/// never see another caller's record, and a key for `/payments` never replays on `/refunds`.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct ScopedKey {
    /// The authenticated caller, e.g. a hash of the `Authorization` header.
    pub principal: String,
    /// The matched route template, e.g. `POST /accounts/{id}/refunds`.
    pub route: String,
    /// The client's idempotency key.
    pub key: IdempotencyKey,
}

/// The state machine of DESIGN.md: `in_progress` → `completed` | `failed` | released.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum RecordState {
    /// The first request is running; the holder of the lease owns the record.
    InProgress,
    /// The outcome is stored and replayed to retries.
    Completed,
    /// The attempt failed after it may have reached the upstream; retries are refused.
    Failed,
}

impl RecordState {
    /// The name stored in SQL `state` columns: `in_progress`, `completed`, `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InProgress => "in_progress",
            Self::Completed => "completed",
            Self::Failed => "failed",
        }
    }

    /// Parses [`RecordState::as_str`]'s output.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "in_progress" => Self::InProgress,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            _ => return None,
        })
    }
}

/// A stored response, replayed byte for byte.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// HTTP status code.
    pub status: u16,
    /// Response headers kept for replay, in order (hop-by-hop and denied ones removed).
    pub headers: Vec<(String, Bytes)>,
    /// Response body; empty when `replayable` is false.
    pub body: Bytes,
    /// False when the response streamed or exceeded the stored-size cap: the operation ran,
    /// but its body was not kept, so a retry is told so instead of getting a copy.
    pub replayable: bool,
    /// The key the response is sealed with ([`crate::seal`]), or `None` in clear. A sealed
    /// response has no headers and its body is the sealed form of the headers and body;
    /// status and `replayable` stay in clear.
    pub sealed_by: Option<EncryptionKeyId>,
}

/// The id of an encryption key ([`crate::seal`]): the first 8 bytes of a SHA-256 over the
/// key, shown as 16 lowercase hex digits. Derived from the key, never from its position in
/// `encryption_key_files`, so it names the same key on every process.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EncryptionKeyId(pub [u8; 8]);

impl fmt::Display for EncryptionKeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for EncryptionKeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EncryptionKeyId({self})")
    }
}

impl std::str::FromStr for EncryptionKeyId {
    type Err = String;

    /// Parses 16 lowercase hex digits (the stored form).
    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        let mut id = [0u8; 8];
        match lower && hex::decode_to_slice(s, &mut id).is_ok() {
            true => Ok(Self(id)),
            false => Err(format!(
                "key id `{}` is not 16 lowercase hex digits",
                s.escape_debug()
            )),
        }
    }
}

impl fmt::Debug for StoredResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoredResponse")
            .field("status", &self.status)
            .field("headers", &self.headers.len())
            .field("body_bytes", &self.body.len())
            .field("replayable", &self.replayable)
            .field("sealed_by", &self.sealed_by)
            .finish()
    }
}

impl StoredResponse {
    /// Encodes the headers for a store column: per header a u32 name length, the name, a u32
    /// value length, the value (big-endian lengths). Values may hold any bytes.
    pub fn encode_headers(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, value) in &self.headers {
            out.extend_from_slice(&(name.len() as u32).to_be_bytes());
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&(value.len() as u32).to_be_bytes());
            out.extend_from_slice(value);
        }
        out
    }

    /// Decodes [`StoredResponse::encode_headers`]'s output.
    ///
    /// # Errors
    /// A message saying where the encoding is broken.
    pub fn decode_headers(mut raw: &[u8]) -> Result<Vec<(String, Bytes)>, String> {
        fn take<'a>(raw: &mut &'a [u8]) -> Result<&'a [u8], String> {
            let (len, rest) = raw.split_first_chunk().ok_or("truncated header length")?;
            let len = u32::from_be_bytes(*len) as usize;
            let part = rest.get(..len).ok_or("truncated header")?;
            *raw = &rest[len..];
            Ok(part)
        }
        let mut headers = Vec::new();
        while !raw.is_empty() {
            let name = std::str::from_utf8(take(&mut raw)?)
                .map_err(|_| "header name is not UTF-8".to_owned())?
                .to_owned();
            let value = Bytes::copy_from_slice(take(&mut raw)?);
            headers.push((name, value));
        }
        Ok(headers)
    }
}

/// A random token that, with the fence, proves ownership of a record.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct LeaseToken(pub i64);

impl LeaseToken {
    /// A fresh random token.
    pub fn random() -> Self {
        Self(rand::random())
    }
}

/// Ownership of an `in_progress` record, returned by a successful acquire.
///
/// `complete`, `fail`, `release` and `renew` are compare-and-set on `(fence, token)`: after a
/// takeover the old holder's lease is stale and every write it attempts is refused with
/// [`crate::StoreError::LeaseLost`].
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Lease {
    /// The record this lease owns.
    pub key: ScopedKey,
    /// Grows by one on every takeover of the record.
    pub fence: i64,
    /// Unique to this acquisition (fences restart after a release deletes the record).
    pub token: LeaseToken,
    /// When the lease lapses unless renewed (store clock).
    pub expires_at: UnixMillis,
}

/// One stored record: the columns of the design article's table, extended.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct IdempotencyRecord {
    /// (principal, route, key).
    pub key: ScopedKey,
    /// The fingerprint of the request that created the record.
    pub fingerprint: Fingerprint,
    /// Current state.
    pub state: RecordState,
    /// Grows by one on every takeover.
    pub fence: i64,
    /// The holder's token while `in_progress`.
    pub lease_token: Option<LeaseToken>,
    /// The holder's lease expiry while `in_progress`; `None` if missing or unreadable, which
    /// counts as in progress until `created_at` + the maximum lease.
    pub lease_expires_at: Option<UnixMillis>,
    /// When the record was first created.
    pub created_at: UnixMillis,
    /// When it reached `completed` or `failed`.
    pub completed_at: Option<UnixMillis>,
    /// When it stops counting (TTL); an expired record is treated as absent.
    pub expires_at: UnixMillis,
    /// The stored response, once `completed`.
    pub response: Option<StoredResponse>,
}
