//! Encryption at rest: stored responses sealed with an AEAD before the store sees them.
//!
//! A [`Keyring`] holds the keys of `encryption_key_files`: the first seals, every one opens.
//! [`Keyring::seal`] turns a response into its sealed form: status and `replayable` stay in
//! clear, the headers are emptied, and the body becomes
//! `version (1 byte, 1) ‖ nonce (24 bytes) ‖ XChaCha20-Poly1305(headers ‖ body) ‖ tag (16 bytes)`,
//! where the plaintext is the headers' length (u32, big-endian), the headers in
//! [`StoredResponse::encode_headers`] form, then the body. The record keeps the key's
//! [`EncryptionKeyId`] beside it (a column on SQLite and PostgreSQL, a field on Redis).
//!
//! The associated data binds the record's scope (principal, route, key), status, fence, key
//! id and `replayable` flag; the stored form ([`crate::redact`]) is a stored header, inside
//! the sealed bytes. So a sealed response copied into another record, or given another
//! status or fence, does not open: the record reads as corrupt, never replayed. The
//! response checksum ([`crate::integrity::response_checksum`]) covers the sealed bytes,
//! never the plaintext. Stores hold no keys; the lifecycle seals an outcome once, before
//! its first write, and opens each record it reads ([`Keyring::open`]), then applies the
//! header and status rules to the plaintext ([`crate::integrity::check_opened`]).
//!
//! ```
//! use idemgate_core::seal::Keyring;
//! use idemgate_core::testing::{response, unique_key};
//!
//! let ring = Keyring::new(vec![[7; 32]]).unwrap();
//! let key = unique_key("alice");
//! let sealed = ring.seal(&key, 1, &response(3));
//! assert_eq!(sealed.sealed_by, Some(ring.sealing_id()));
//! assert!(sealed.headers.is_empty());
//! assert_eq!(ring.open(&key, 1, sealed.clone()).unwrap(), response(3));
//! assert!(ring.open(&key, 2, sealed).is_err()); // another fence
//! ```

use std::fmt;
use std::path::Path;

use bytes::Bytes;
use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::fingerprint::Fingerprint;
use crate::record::{EncryptionKeyId, ScopedKey, StoredResponse};

/// The sealed form's first byte: its layout version.
const FORM_VERSION: u8 = 1;
/// Bytes of a nonce (XChaCha20: 192 bits, so random nonces never repeat in practice).
const NONCE_BYTES: usize = 24;
/// Bytes of the Poly1305 tag.
const TAG_BYTES: usize = 16;
/// Bytes a sealed body adds to the plaintext: the version, the nonce, the tag.
pub const SEAL_OVERHEAD: usize = 1 + NONCE_BYTES + TAG_BYTES;
/// Domain separation of the key id, the AEAD key and the associated data.
const KEY_ID_TAG: &[u8] = b"idemgate-key-id-v1";
const SEAL_KEY_TAG: &[u8] = b"idemgate-seal-key-v1";
const AAD_TAG: &[u8] = b"idemgate-seal-v1";

/// Domain separation of the fingerprint key and of keyed fingerprints.
const FINGERPRINT_KEY_TAG: &[u8] = b"idemgate-fingerprint-key-v1";
const FINGERPRINT_TAG: &[u8] = b"idemgate-fingerprint-v1";

/// The bit a keyed fingerprint's version carries ([`Keyring::keyed_fingerprint`]); the other
/// bits are the version of the plain fingerprint it was keyed from.
pub const KEYED_FINGERPRINT: u16 = 0x8000;

/// One key of a [`Keyring`].
struct SealingKey {
    id: EncryptionKeyId,
    aead: XChaCha20Poly1305,
    /// HMAC-SHA256 of keyed fingerprints under a key derived from the key, its key blocks
    /// already hashed (cloned per fingerprint).
    fingerprint: Hmac<Sha256>,
}

/// The encryption keys of a process: the first seals, every one opens. Its `Debug` shows
/// the key ids only.
pub struct Keyring {
    keys: Vec<SealingKey>,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.ids()).finish()
    }
}

/// Why a sealed response did not open: the record is corrupt, never replayed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// The record names a key this process does not have (removed too early, or another
    /// deployment's).
    #[error("sealed with key id {0}, which is not among the configured encryption keys")]
    UnknownKey(EncryptionKeyId),
    /// The sealed bytes are damaged, or were moved from another record, status or fence.
    #[error("sealed response does not open with key id {0} (damaged or moved)")]
    Forged(EncryptionKeyId),
}

impl Keyring {
    /// A keyring over 32-byte keys, the first sealing.
    ///
    /// # Errors
    /// No keys, or two keys with one id (the same key twice).
    pub fn new(keys: Vec<[u8; 32]>) -> Result<Self, String> {
        if keys.is_empty() {
            return Err("no encryption keys".into());
        }
        let mut ring = Vec::with_capacity(keys.len());
        for secret in keys {
            let id = key_id(&secret);
            if ring.iter().any(|k: &SealingKey| k.id == id) {
                return Err(format!("key id {id} is configured twice"));
            }
            let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&secret).expect("any length");
            mac.update(SEAL_KEY_TAG);
            let derived = mac.finalize().into_bytes();
            let aead = XChaCha20Poly1305::new_from_slice(&derived).expect("32 bytes");
            let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&secret).expect("any length");
            mac.update(FINGERPRINT_KEY_TAG);
            let derived = mac.finalize().into_bytes();
            let fingerprint = <Hmac<Sha256> as Mac>::new_from_slice(&derived).expect("any length");
            ring.push(SealingKey {
                id,
                aead,
                fingerprint,
            });
        }
        Ok(Self { keys: ring })
    }

    /// Reads `paths` (`encryption_key_files`), each holding 64 hex digits (surrounding
    /// whitespace allowed), the first the sealing key.
    ///
    /// # Errors
    /// A message naming the file and what is wrong with it (unreadable, not 64 hex digits,
    /// a duplicate); never the file's bytes.
    pub fn load(paths: &[impl AsRef<Path>]) -> Result<Self, String> {
        let mut keys = Vec::with_capacity(paths.len());
        for path in paths {
            let path = path.as_ref();
            let text = std::fs::read(path)
                .map_err(|e| format!("encryption key file {}: {e}", path.display()))?;
            let key = parse_key(&text)
                .map_err(|e| format!("encryption key file {}: {e}", path.display()))?;
            keys.push(key);
        }
        Self::new(keys).map_err(|e| format!("encryption_key_files: {e}"))
    }

    /// The ids of the keys, the sealing key first.
    pub fn ids(&self) -> impl Iterator<Item = EncryptionKeyId> + '_ {
        self.keys.iter().map(|k| k.id)
    }

    /// The id of the key that seals.
    pub fn sealing_id(&self) -> EncryptionKeyId {
        self.keys[0].id
    }

    /// `plain` keyed with the first key: HMAC-SHA256 over its version and digest, with the
    /// version `plain.version | KEYED_FINGERPRINT`. Stored instead of the plain SHA-256 when
    /// responses are sealed, so the store's fingerprints confirm no guessed request.
    pub fn keyed_fingerprint(&self, plain: Fingerprint) -> Fingerprint {
        keyed(&self.keys[0], plain)
    }

    /// The keyed form of `plain` that equals `stored` under one of the keys (a record keyed
    /// before a rotation), or `None` when no key gives it (another request, or a key no
    /// longer configured).
    pub fn matching_fingerprint(
        &self,
        plain: Fingerprint,
        stored: &Fingerprint,
    ) -> Option<Fingerprint> {
        self.keys
            .iter()
            .map(|k| keyed(k, plain))
            .find(|candidate| candidate == stored)
    }

    /// `response` sealed with the first key for the record `key` at `fence` (see the
    /// module). A response already sealed is returned as it is.
    pub fn seal(&self, key: &ScopedKey, fence: i64, response: &StoredResponse) -> StoredResponse {
        if response.sealed_by.is_some() {
            return response.clone();
        }
        let sealing = &self.keys[0];
        let headers = response.encode_headers();
        // One buffer, sealed in place: version, nonce, then the plaintext, then the tag.
        let plain_len = 4 + headers.len() + response.body.len();
        let mut body = Vec::with_capacity(1 + NONCE_BYTES + plain_len + TAG_BYTES);
        let nonce: [u8; NONCE_BYTES] = rand::random();
        body.push(FORM_VERSION);
        body.extend_from_slice(&nonce);
        body.extend_from_slice(&(headers.len() as u32).to_be_bytes());
        body.extend_from_slice(&headers);
        body.extend_from_slice(&response.body);
        let aad = associated_data(key, response.status, fence, sealing.id, response.replayable);
        let tag = sealing
            .aead
            .encrypt_in_place_detached(
                XNonce::from_slice(&nonce),
                &aad,
                &mut body[1 + NONCE_BYTES..],
            )
            .expect("XChaCha20-Poly1305 seals any length under 256 GiB");
        body.extend_from_slice(&tag);
        StoredResponse {
            status: response.status,
            headers: Vec::new(),
            body: Bytes::from(body),
            replayable: response.replayable,
            sealed_by: Some(sealing.id),
        }
    }

    /// The response `sealed` holds, for the record `key` at `fence`. A response in clear is
    /// returned as it is.
    ///
    /// # Errors
    /// [`OpenError`]: the key is not configured, or the bytes do not open.
    pub fn open(
        &self,
        key: &ScopedKey,
        fence: i64,
        sealed: StoredResponse,
    ) -> Result<StoredResponse, OpenError> {
        let Some(id) = sealed.sealed_by else {
            return Ok(sealed);
        };
        let sealing = self
            .keys
            .iter()
            .find(|k| k.id == id)
            .ok_or(OpenError::UnknownKey(id))?;
        let forged = || OpenError::Forged(id);
        let (version, rest) = sealed.body.split_first().ok_or_else(forged)?;
        if *version != FORM_VERSION || rest.len() < NONCE_BYTES + TAG_BYTES {
            return Err(forged());
        }
        let (nonce, sealed_part) = rest.split_at(NONCE_BYTES);
        let (ciphertext, tag) = sealed_part.split_at(sealed_part.len() - TAG_BYTES);
        let aad = associated_data(key, sealed.status, fence, id, sealed.replayable);
        let mut plain = ciphertext.to_vec();
        sealing
            .aead
            .decrypt_in_place_detached(XNonce::from_slice(nonce), &aad, &mut plain, tag.into())
            .map_err(|_| forged())?;
        let (len, rest) = plain.split_first_chunk::<4>().ok_or_else(forged)?;
        let len = u32::from_be_bytes(*len) as usize;
        let raw_headers = rest.get(..len).ok_or_else(forged)?;
        let headers = StoredResponse::decode_headers(raw_headers).map_err(|_| forged())?;
        // The body is the plaintext's tail: no copy.
        let body = Bytes::from(plain).slice(4 + len..);
        Ok(StoredResponse {
            status: sealed.status,
            headers,
            body,
            replayable: sealed.replayable,
            sealed_by: None,
        })
    }
}

fn keyed(key: &SealingKey, plain: Fingerprint) -> Fingerprint {
    let mut mac = key.fingerprint.clone();
    mac.update(FINGERPRINT_TAG);
    mac.update(&plain.version.to_be_bytes());
    mac.update(&plain.digest);
    Fingerprint {
        version: plain.version | KEYED_FINGERPRINT,
        digest: mac.finalize().into_bytes().into(),
    }
}

/// The id of `secret` (see [`EncryptionKeyId`]).
pub fn key_id(secret: &[u8; 32]) -> EncryptionKeyId {
    let digest = Sha256::new()
        .chain_update(KEY_ID_TAG)
        .chain_update(secret)
        .finalize();
    EncryptionKeyId(digest[..8].try_into().expect("8 of 32 bytes"))
}

/// A key file's text: 64 hex digits, whitespace around them ignored.
///
/// # Errors
/// What is wrong, without the file's bytes.
pub fn parse_key(text: &[u8]) -> Result<[u8; 32], String> {
    let text = text.trim_ascii();
    let mut key = [0u8; 32];
    if text.len() != 64 {
        return Err(format!(
            "holds {} characters, not 64 hex digits",
            text.len()
        ));
    }
    hex::decode_to_slice(text, &mut key).map_err(|_| "is not 64 hex digits".to_owned())?;
    if key.iter().all(|b| *b == key[0]) {
        return Err("holds one byte repeated: not a random key".into());
    }
    Ok(key)
}

/// The associated data: the tag, then each field length-prefixed.
fn associated_data(
    key: &ScopedKey,
    status: u16,
    fence: i64,
    id: EncryptionKeyId,
    replayable: bool,
) -> Vec<u8> {
    let mut aad = Vec::with_capacity(64 + key.principal.len() + key.route.len());
    let mut field = |bytes: &[u8]| {
        aad.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
        aad.extend_from_slice(bytes);
    };
    field(AAD_TAG);
    field(key.principal.as_bytes());
    field(key.route.as_bytes());
    field(key.key.as_str().as_bytes());
    field(&status.to_be_bytes());
    field(&fence.to_be_bytes());
    field(&id.0);
    field(&[u8::from(replayable)]);
    aad
}

#[cfg(test)]
mod tests;
