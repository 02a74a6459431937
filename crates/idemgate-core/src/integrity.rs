//! Record integrity: the one validation every store's decoder goes through, and the checksum
//! that seals a stored response.
//!
//! A store reads its row (a SQL row, a Redis hash, a map entry) into a [`RawRecord`], with
//! `None` for any field that is missing or cannot be read as its type, and calls
//! [`RawRecord::validate`]. So "corrupt" means the same thing on every store: a record that
//! fails here is never replayed, and the caller gets [`StoreError::Corrupt`].
//!
//! The checksum ([`response_checksum`]) is SHA-256 over the record's scope and the stored
//! response (status, replayable flag, headers, body), each field length-prefixed. It is
//! written with the outcome and verified on every read; a record written before checksums
//! existed has none and is checked by the other rules only.
//!
//! ```
//! use bytes::Bytes;
//! use idemgate_core::integrity::{response_checksum, RawRecord};
//! use idemgate_core::testing::{fp, response, unique_key};
//!
//! let key = unique_key("alice");
//! let resp = response(4);
//! let mut raw = RawRecord::completed(&key, fp(1), 1, 0, 1000, &resp);
//! assert!(raw.clone().validate().is_ok());
//! raw.body = Some(Bytes::from_static(b"cut"));
//! assert!(raw.validate().is_err());
//! # let _ = response_checksum(&key, &resp);
//! ```

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::fingerprint::Fingerprint;
use crate::record::{
    EncryptionKeyId, IdempotencyRecord, LeaseToken, RecordState, ScopedKey, StoredResponse,
    UnixMillis,
};
use crate::store::StoreError;

/// Domain separation for [`response_checksum`]; a new layout gets a new tag.
const CHECKSUM_TAG: &[u8] = b"idemgate-response-v1";

/// Domain separation for a sealed response's checksum ([`crate::seal`]): a build from before
/// sealing computes [`CHECKSUM_TAG`]'s sum over it, which never matches, so it reads a sealed
/// record as corrupt and never replays its ciphertext.
const SEALED_CHECKSUM_TAG: &[u8] = b"idemgate-response-sealed-v1";

/// SHA-256 over the record's scope and `response` (status, replayable, headers, body; for a
/// sealed response, the key id and the sealed bytes, never the plaintext).
///
/// Binding the scope means a response copied into another record fails its check too.
pub fn response_checksum(key: &ScopedKey, response: &StoredResponse) -> [u8; 32] {
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_be_bytes());
        h.update(bytes);
    };
    match &response.sealed_by {
        None => field(CHECKSUM_TAG),
        Some(id) => {
            field(SEALED_CHECKSUM_TAG);
            field(&id.0);
        }
    }
    field(key.principal.as_bytes());
    field(key.route.as_bytes());
    field(key.key.as_str().as_bytes());
    field(&response.status.to_be_bytes());
    field(&[u8::from(response.replayable)]);
    field(&response.encode_headers());
    field(&response.body);
    h.finalize().into()
}

/// True for a status a replayable stored response may have: `200`–`599` except `304` (`1xx`
/// are never stored and `304` is never replayed; DESIGN.md, "Replay hygiene").
pub fn is_storable_status(status: u16) -> bool {
    (200..=599).contains(&status) && status != 304
}

/// True for a status a stored response may have: [`is_storable_status`] when it is
/// replayable; any final status `200`–`599` (`304` included) when it is not, since only the
/// status is kept (RFC 9110 §15.4.5: a `304` has no content and answers a conditional
/// `GET`/`HEAD` only, so it is recorded but never replayed).
pub fn is_status_allowed(status: u16, replayable: bool) -> bool {
    match replayable {
        true => is_storable_status(status),
        false => (200..=599).contains(&status),
    }
}

/// Largest stored response, body plus encoded headers, in bytes (256 MiB). Every store takes
/// a value this large (Redis caps a value at 512 MB, PostgreSQL and SQLite at 1 GB); a larger
/// response is delivered but not kept.
pub const MAX_STORED_RESPONSE_BYTES: usize = 256 << 20;

/// Checks, before an outcome write, that `response` can be stored and read back: the rules
/// [`RawRecord::validate`] applies to a completed record's response (status, headers that
/// round-trip through [`StoredResponse::encode_headers`], no body when not replayable) and
/// [`MAX_STORED_RESPONSE_BYTES`]. A front door that gets an error keeps the outcome as not
/// replayable instead of writing a record that would read back as corrupt.
///
/// # Errors
/// The first rule broken, as a message (e.g. `"status 304 is never replayed"`).
pub fn check_storable(response: &StoredResponse) -> Result<(), String> {
    let status = response.status;
    if !is_status_allowed(status, response.replayable) {
        return Err(match status {
            304 => "status 304 is never replayed".to_owned(),
            s => format!("status {s} is not a storable final status (200-599)"),
        });
    }
    match response.sealed_by {
        None => check_opened(response)?,
        Some(_) => check_sealed_form(response)?,
    }
    let too_long = |n: usize| u32::try_from(n).is_err();
    if let Some((name, _)) = response
        .headers
        .iter()
        .find(|(n, v)| n.is_empty() || too_long(n.len()) || too_long(v.len()))
    {
        return Err(format!("header `{name}` cannot be encoded"));
    }
    let header_bytes: usize = response
        .headers
        .iter()
        .map(|(n, v)| 8 + n.len() + v.len())
        .sum();
    let total = header_bytes.saturating_add(response.body.len());
    if total > MAX_STORED_RESPONSE_BYTES {
        return Err(format!(
            "{total} bytes of headers and body exceed {MAX_STORED_RESPONSE_BYTES}"
        ));
    }
    Ok(())
}

/// The rules on a response's headers and body in clear (a response read from a store, or
/// opened by [`crate::seal::Keyring::open`]): HTTP header syntax ([`check_header_syntax`]),
/// and no body when it is not replayable.
///
/// # Errors
/// The first rule broken, as a message.
pub fn check_opened(response: &StoredResponse) -> Result<(), String> {
    check_header_syntax(&response.headers)?;
    if !response.replayable && !response.body.is_empty() {
        return Err("a response marked not replayable holds a body".into());
    }
    Ok(())
}

/// The shape of a sealed response ([`crate::seal`]): no headers in clear, and a body at
/// least as long as the sealed form's overhead.
fn check_sealed_form(response: &StoredResponse) -> Result<(), String> {
    if !response.headers.is_empty() {
        return Err("a sealed response holds headers in clear".into());
    }
    if response.body.len() < crate::seal::SEAL_OVERHEAD + 4 {
        return Err("a sealed response is shorter than its sealed form".into());
    }
    Ok(())
}

/// Header fields as HTTP allows them (RFC 9110 §5.1, §5.5): a name of token characters, a
/// value without control characters other than tab (so no CR, LF or NUL). A stored
/// response breaking this is never written, and one read back is corrupt: it is never
/// replayed, by any front door.
///
/// # Errors
/// The first field that breaks the rule, by position.
pub fn check_header_syntax(headers: &[(String, Bytes)]) -> Result<(), String> {
    let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    let field_byte = |b: u8| b == b'\t' || (b >= 0x20 && b != 0x7f);
    for (i, (name, value)) in headers.iter().enumerate() {
        if name.is_empty() || !name.bytes().all(tchar) {
            return Err(format!("header {i} has a name that is not an HTTP token"));
        }
        if !value.iter().copied().all(field_byte) {
            return Err(format!(
                "header `{name}` has a control character in its value"
            ));
        }
    }
    Ok(())
}

/// A record as a store read it, before validation. `None` means missing or unreadable as
/// its type (a non-numeric Redis field, a NULL column).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawRecord {
    /// (principal, route, key) the record was looked up by.
    pub key: ScopedKey,
    /// Fingerprint algorithm version.
    pub fingerprint_version: Option<i64>,
    /// Fingerprint digest; must be 32 bytes.
    pub fingerprint_digest: Option<Vec<u8>>,
    /// `in_progress`, `completed` or `failed`.
    pub state: Option<String>,
    /// Fence, at least 1.
    pub fence: Option<i64>,
    /// The holder's token while `in_progress`.
    pub lease_token: Option<i64>,
    /// The holder's lease expiry, ms since the epoch (store clock).
    pub lease_expires_at: Option<UnixMillis>,
    /// Creation time, ms since the epoch.
    pub created_at: Option<UnixMillis>,
    /// When the outcome was written, ms since the epoch.
    pub completed_at: Option<UnixMillis>,
    /// TTL end, ms since the epoch.
    pub expires_at: Option<UnixMillis>,
    /// Stored HTTP status (completed records).
    pub status: Option<i64>,
    /// Stored headers in [`StoredResponse::encode_headers`] form (completed records).
    pub headers: Option<Bytes>,
    /// Stored body (completed, replayable records; empty when not replayable).
    pub body: Option<Bytes>,
    /// Whether the body was kept (completed records).
    pub replayable: Option<bool>,
    /// [`response_checksum`] of the stored response; `None` for records written before
    /// checksums existed.
    pub checksum: Option<Vec<u8>>,
    /// The [`EncryptionKeyId`] a sealed response was sealed with, as 16 hex digits
    /// ([`crate::seal`]); `None` for a response in clear.
    pub sealed_by: Option<String>,
}

impl RawRecord {
    /// The raw form of a record `in_progress` under a lease, as stores write it on insert.
    pub fn in_progress(
        key: &ScopedKey,
        fingerprint: Fingerprint,
        fence: i64,
        token: LeaseToken,
        lease_expires_at: UnixMillis,
        created_at: UnixMillis,
        expires_at: UnixMillis,
    ) -> Self {
        Self {
            key: key.clone(),
            fingerprint_version: Some(i64::from(fingerprint.version)),
            fingerprint_digest: Some(fingerprint.digest.to_vec()),
            state: Some(RecordState::InProgress.as_str().to_owned()),
            fence: Some(fence),
            lease_token: Some(token.0),
            lease_expires_at: Some(lease_expires_at),
            created_at: Some(created_at),
            completed_at: None,
            expires_at: Some(expires_at),
            status: None,
            headers: None,
            body: None,
            replayable: None,
            checksum: None,
            sealed_by: None,
        }
    }

    /// The raw form of a completed record with `response` and its checksum.
    pub fn completed(
        key: &ScopedKey,
        fingerprint: Fingerprint,
        fence: i64,
        created_at: UnixMillis,
        expires_at: UnixMillis,
        response: &StoredResponse,
    ) -> Self {
        let mut raw = Self::in_progress(
            key,
            fingerprint,
            fence,
            LeaseToken(0),
            0,
            created_at,
            expires_at,
        );
        raw.set_outcome(RecordState::Completed, Some(response), created_at);
        raw
    }

    /// Writes an outcome into the raw form: the state, the completion time, and for
    /// `completed` the response and its checksum; the lease is cleared.
    pub fn set_outcome(
        &mut self,
        state: RecordState,
        response: Option<&StoredResponse>,
        now: UnixMillis,
    ) {
        self.state = Some(state.as_str().to_owned());
        self.completed_at = Some(now);
        self.lease_token = None;
        self.lease_expires_at = None;
        if let Some(r) = response {
            self.status = Some(i64::from(r.status));
            self.headers = Some(Bytes::from(r.encode_headers()));
            self.body = Some(r.body.clone());
            self.replayable = Some(r.replayable);
            self.checksum = Some(response_checksum(&self.key, r).to_vec());
            self.sealed_by = r.sealed_by.map(|id| id.to_string());
        }
    }

    /// Checks every rule and builds the record.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] naming the first rule broken: a missing or out-of-range
    /// field, an unknown state, a digest that is not 32 bytes, a completed record without a
    /// storable status ([`is_status_allowed`]: `200`–`599`, `304` only when not replayable),
    /// headers, replayable flag or (when
    /// replayable) body, headers that do not decode, or a checksum that does not match.
    pub fn validate(self) -> Result<IdempotencyRecord, StoreError> {
        let corrupt = |detail: &str| StoreError::Corrupt {
            detail: detail.to_owned(),
        };
        let version = self
            .fingerprint_version
            .and_then(|v| u16::try_from(v).ok())
            .ok_or_else(|| corrupt("fingerprint version missing or out of range"))?;
        let digest: [u8; 32] = self
            .fingerprint_digest
            .as_deref()
            .and_then(|d| d.try_into().ok())
            .ok_or_else(|| corrupt("fingerprint digest missing or not 32 bytes"))?;
        let state = self
            .state
            .as_deref()
            .and_then(RecordState::parse)
            .ok_or_else(|| corrupt("state missing or unknown"))?;
        let fence = self
            .fence
            .filter(|f| *f >= 1)
            .ok_or_else(|| corrupt("fence missing or below 1"))?;
        let created_at = self
            .created_at
            .ok_or_else(|| corrupt("created_at missing"))?;
        let expires_at = self
            .expires_at
            .ok_or_else(|| corrupt("expires_at missing"))?;
        let response = match state {
            RecordState::Completed => Some(self.response()?),
            _ => None,
        };
        let in_progress = state == RecordState::InProgress;
        Ok(IdempotencyRecord {
            key: self.key,
            fingerprint: Fingerprint { version, digest },
            state,
            fence,
            lease_token: self.lease_token.filter(|_| in_progress).map(LeaseToken),
            lease_expires_at: self.lease_expires_at.filter(|_| in_progress),
            created_at,
            completed_at: self.completed_at,
            expires_at,
            response,
        })
    }

    /// The stored response of a completed record, checked.
    fn response(&self) -> Result<StoredResponse, StoreError> {
        let corrupt = |detail: &str| StoreError::Corrupt {
            detail: detail.to_owned(),
        };
        let replayable = self
            .replayable
            .ok_or_else(|| corrupt("replayable flag missing"))?;
        let status = self
            .status
            .and_then(|s| u16::try_from(s).ok())
            .filter(|s| is_status_allowed(*s, replayable))
            .ok_or_else(|| corrupt("stored status missing or not a storable HTTP status"))?;
        let sealed_by = match &self.sealed_by {
            None => None,
            Some(id) => Some(id.parse::<EncryptionKeyId>().map_err(|e| corrupt(&e))?),
        };
        let raw_headers = self
            .headers
            .as_ref()
            .ok_or_else(|| corrupt("stored headers missing"))?;
        let headers = StoredResponse::decode_headers(raw_headers)
            .map_err(|e| corrupt(&format!("stored headers: {e}")))?;
        let body = match (&self.body, replayable) {
            (Some(b), _) => b.clone(),
            (None, false) if sealed_by.is_none() => Bytes::new(),
            (None, _) => return Err(corrupt("stored body missing")),
        };
        let response = StoredResponse {
            status,
            headers,
            body,
            replayable,
            sealed_by,
        };
        match sealed_by {
            None => check_header_syntax(&response.headers)
                .map_err(|e| corrupt(&format!("stored headers: {e}")))
                .and_then(|()| check_opened(&response).map_err(|e| corrupt(&e))),
            Some(_) => check_sealed_form(&response).map_err(|e| corrupt(&e)),
        }?;
        if let Some(sum) = &self.checksum {
            if sum.as_slice() != response_checksum(&self.key, &response) {
                return Err(corrupt("stored response fails its checksum"));
            }
        }
        Ok(response)
    }
}

#[cfg(test)]
mod tests;
