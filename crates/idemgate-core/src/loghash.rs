//! Keyed hashes of idempotency keys and principals for logs.
//!
//! Logs name a request's key and principal so an operator can follow one key across retries
//! and gateways, but a key may be guessable and a principal may be an identity (or, with
//! `principal = "authorization"`, a credential), so neither is ever logged as is nor as a
//! plain digest (which a dictionary reverses). Each is logged as
//! `HMAC-SHA256(secret, label || 0x00 || value)` (RFC 2104), truncated to its first 8 bytes
//! and written as 16 hex digits; `label` is `key` or `principal`, so the same string hashes
//! differently in the two roles.
//!
//! The secret is per process (32 random bytes) unless [`set_secret`] was called first: with
//! one configured secret on every gateway, the same key hashes the same on all of them and
//! across restarts. Without the secret a hash cannot be reversed or checked.

use std::sync::OnceLock;

use hmac::{Hmac, Mac};
use sha2::Sha256;

static SECRET: OnceLock<Vec<u8>> = OnceLock::new();

/// The shortest secret [`set_secret`] accepts, in bytes (RFC 2104 §3: at least the hash
/// output length, 32 bytes for SHA-256, is recommended; half of that is the floor here).
pub const MIN_SECRET_BYTES: usize = 16;

/// Why [`set_secret`] refused a secret.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// Shorter than [`MIN_SECRET_BYTES`].
    #[error("the log hash secret must be at least {MIN_SECRET_BYTES} bytes, got {0}")]
    TooShort(usize),
    /// A secret was already set, or a hash was already computed with the random one.
    #[error("the log hash secret is already in use")]
    AlreadySet,
}

/// Uses `secret` (at least [`MIN_SECRET_BYTES`] bytes) for every hash of this process.
///
/// # Errors
/// [`SecretError::TooShort`]; [`SecretError::AlreadySet`] once a secret is in use (hashes
/// already logged must stay comparable, so it never changes).
pub fn set_secret(secret: &[u8]) -> Result<(), SecretError> {
    if secret.len() < MIN_SECRET_BYTES {
        return Err(SecretError::TooShort(secret.len()));
    }
    SECRET
        .set(secret.to_vec())
        .map_err(|_| SecretError::AlreadySet)
}

fn secret() -> &'static [u8] {
    SECRET.get_or_init(|| rand::random::<[u8; 32]>().to_vec())
}

fn hash(label: &str, value: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret()).expect("HMAC takes any key length");
    mac.update(label.as_bytes());
    mac.update(&[0]);
    mac.update(value.as_bytes());
    hex::encode(&mac.finalize().into_bytes()[..8])
}

/// The keyed hash of an idempotency key: 16 hex digits.
pub fn key_hash(key: &str) -> String {
    hash("key", key)
}

/// The keyed hash of a principal: 16 hex digits.
pub fn principal_hash(principal: &str) -> String {
    hash("principal", principal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_stable_keyed_and_role_separated() {
        let k = key_hash("order-1");
        assert_eq!(k.len(), 16);
        assert!(k.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(k, key_hash("order-1"), "stable within the process");
        assert_ne!(k, key_hash("order-2"));
        assert_ne!(
            k,
            principal_hash("order-1"),
            "the role is part of the input"
        );
        // Not the plain digest a dictionary would reverse.
        let plain = hex::encode(&<Sha256 as sha2::Digest>::digest(b"order-1")[..8]);
        assert_ne!(k, plain);
        // The secret is in use now: it cannot change under hashes already logged.
        assert_eq!(set_secret(&[7; 32]), Err(SecretError::AlreadySet));
        assert_eq!(set_secret(b"short"), Err(SecretError::TooShort(5)));
    }
}
