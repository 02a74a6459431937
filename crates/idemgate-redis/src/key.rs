//! Record keys: one Redis key per (principal, route, key).
//!
//! The key is `<prefix>{<hex SHA-256>}`, where the digest covers a version tag and the
//! three scope parts, each prefixed with its length as a big-endian u64, so no two
//! different scopes can produce the same input (`("ab", "c")` and `("a", "bc")` differ).
//! The braces make the digest the Redis Cluster hash tag: the slot depends only on the
//! scope, never on the prefix, and records spread evenly over the slots. The scope is also
//! stored inside the record and compared on every read and insert, so even a digest
//! collision could never replay one caller's response to another.

use idemgate_core::ScopedKey;
use sha2::{Digest, Sha256};

use crate::error::{RedisStoreError, Result};

/// The key prefix used unless [`crate::RedisStore::with_key_prefix`] changes it.
pub const DEFAULT_KEY_PREFIX: &str = "idemgate:";

/// The longest key prefix accepted, in bytes.
pub const MAX_KEY_PREFIX_BYTES: usize = 256;

/// Versions the digest input, so a future layout can never collide with this one.
const DOMAIN: &[u8] = b"idemgate-redis-record-v1";

/// Checks a key prefix.
///
/// # Errors
/// [`RedisStoreError::InvalidPrefix`] if it holds `{` or `}` (the record's hash tag must
/// be the first pair of braces in the key) or is longer than [`MAX_KEY_PREFIX_BYTES`].
pub(crate) fn validate_prefix(prefix: &str) -> Result<()> {
    let reason = if prefix.contains(['{', '}']) {
        "it must not contain `{` or `}` (the record's cluster hash tag follows it)"
    } else if prefix.len() > MAX_KEY_PREFIX_BYTES {
        "it is longer than 256 bytes"
    } else {
        return Ok(());
    };
    Err(RedisStoreError::InvalidPrefix {
        prefix: prefix.to_owned(),
        reason,
    })
}

/// The Redis key of the record for `key`: `<prefix>{<64 hex digits>}`.
pub(crate) fn record_key(prefix: &str, key: &ScopedKey) -> String {
    let mut h = Sha256::new();
    for part in [
        DOMAIN,
        key.principal.as_bytes(),
        key.route.as_bytes(),
        key.key.as_str().as_bytes(),
    ] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    let mut out = String::with_capacity(prefix.len() + 66);
    out.push_str(prefix);
    out.push('{');
    out.push_str(&hex::encode(h.finalize()));
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use idemgate_core::IdempotencyKey;

    use super::*;

    fn scoped(principal: &str, route: &str, key: &str) -> ScopedKey {
        ScopedKey {
            principal: principal.into(),
            route: route.into(),
            key: IdempotencyKey::new(key).unwrap(),
        }
    }

    #[test]
    fn layout_is_prefix_and_hash_tag() {
        let k = record_key(
            "idemgate:",
            &scoped("alice", "POST /payments", "key-00000001"),
        );
        assert!(k.starts_with("idemgate:{") && k.ends_with('}'), "{k}");
        assert_eq!(k.len(), "idemgate:".len() + 66);
        // stable across builds: the layout is persistent data
        assert_eq!(
            record_key("", &scoped("alice", "POST /payments", "key-00000001")),
            "{55db6441182de20b41373bd1c4b4b5c641b0e939dfdd426f62263ea93b874c81}"
        );
    }

    #[test]
    fn parts_never_run_together() {
        let a = record_key("p:", &scoped("ab", "c", "key-00000001"));
        let b = record_key("p:", &scoped("a", "bc", "key-00000001"));
        let c = record_key("p:", &scoped("a", "b", "ckey-0000001"));
        assert_ne!(a, b);
        assert_ne!(b, c);
        assert_ne!(
            record_key("p:", &scoped("alice", "POST /payments", "key-00000001")),
            record_key("p:", &scoped("alice", "POST /refunds", "key-00000001"))
        );
    }

    #[test]
    fn prefixes_with_braces_or_too_long_are_refused() {
        assert!(validate_prefix("idemgate:").is_ok());
        assert!(validate_prefix("").is_ok());
        assert!(validate_prefix("app{x}:").is_err());
        assert!(validate_prefix("app}").is_err());
        assert!(validate_prefix(&"x".repeat(257)).is_err());
    }
}
