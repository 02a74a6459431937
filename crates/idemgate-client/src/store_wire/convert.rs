//! Conversions between the wire bodies and the core types.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use bytes::Bytes;
use idemgate_core::{
    Fingerprint, IdempotencyKey, IdempotencyRecord, Lease, LeaseToken, RecordState, ScopedKey,
    StoredResponse,
};

use super::{StoreFingerprint, StoreKey, StoreLease, StoreRecord, StoreResponse};

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
            sealed_by: r.sealed_by.map(|id| id.to_string()),
        }
    }

    /// To a core response.
    ///
    /// # Errors
    /// A value or the body is not base64, or `sealed_by` is not 16 lowercase hex digits.
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
            sealed_by: match &self.sealed_by {
                Some(id) => Some(id.parse().map_err(|e| format!("sealed_by: {e}"))?),
                None => None,
            },
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
