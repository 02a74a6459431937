//! Decoding the fields of a record hash (see `scripts/common.lua` for the layout): every
//! record goes through [`RawRecord::validate`], the one validation of the core, so a damaged
//! record is [`StoreError::Corrupt`] exactly as on every other store.

use bytes::Bytes;
use idemgate_core::integrity::RawRecord;
use idemgate_core::{IdempotencyRecord, ScopedKey, StoreError, UnixMillis};
use redis::Value;

use crate::error::{corrupt, unexpected, Result};

/// The fields of one record hash, as `HGETALL` returned them.
#[derive(Debug, Default)]
pub(crate) struct Fields(Vec<(Vec<u8>, Vec<u8>)>);

impl Fields {
    /// Reads an `HGETALL` reply: a flat array of field, value, field, value... (RESP2) or a
    /// map (RESP3).
    pub(crate) fn from_value(v: Value) -> Result<Self> {
        let pairs = match v {
            Value::Array(items) => {
                if items.len() % 2 != 0 {
                    return Err(unexpected("odd-length HGETALL reply"));
                }
                let mut it = items.into_iter();
                let mut pairs = Vec::new();
                while let (Some(f), Some(v)) = (it.next(), it.next()) {
                    pairs.push((bytes(f)?, bytes(v)?));
                }
                pairs
            }
            Value::Map(items) => items
                .into_iter()
                .map(|(f, v)| Ok((bytes(f)?, bytes(v)?)))
                .collect::<Result<_>>()?,
            Value::Nil => Vec::new(),
            other => return Err(unexpected(format!("HGETALL reply {other:?}"))),
        };
        Ok(Self(pairs))
    }

    /// Every field a record may have, in the order `insert_or_get.lua` returns their values
    /// (see `scripts/common.lua`).
    pub(crate) const NAMES: [&'static str; 18] = [
        "p", "r", "k", "fv", "fd", "st", "fe", "lt", "le", "ca", "co", "ex", "rs", "rh", "rb",
        "rr", "cs", "ki",
    ];

    /// Reads an `HMGET` reply for [`Fields::NAMES`]: one value per name, in order, nil for
    /// a field not set (left out, as `HGETALL` leaves it out). Half the items of an
    /// `HGETALL` reply to parse.
    pub(crate) fn from_values(v: Value) -> Result<Self> {
        let items = array(v)?;
        if items.len() != Self::NAMES.len() {
            return Err(unexpected(format!(
                "HMGET reply of {} values for {} fields",
                items.len(),
                Self::NAMES.len()
            )));
        }
        let mut pairs = Vec::with_capacity(items.len());
        for (name, value) in Self::NAMES.iter().zip(items) {
            if !matches!(value, Value::Nil) {
                pairs.push((name.as_bytes().to_vec(), bytes(value)?));
            }
        }
        Ok(Self(pairs))
    }

    /// True when the record does not exist.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value of field `name`, if present.
    pub(crate) fn get(&self, name: &str) -> Option<&[u8]> {
        self.0
            .iter()
            .find(|(f, _)| f == name.as_bytes())
            .map(|(_, v)| v.as_slice())
    }

    fn take(&mut self, name: &str) -> Option<Vec<u8>> {
        let i = self.0.iter().position(|(f, _)| f == name.as_bytes())?;
        Some(self.0.swap_remove(i).1)
    }

    /// An integer field: `None` when missing or unreadable.
    fn int(&self, name: &str) -> Option<i64> {
        std::str::from_utf8(self.get(name)?).ok()?.parse().ok()
    }

    /// The expiry (`ex`), if readable.
    pub(crate) fn expires_at(&self) -> Option<UnixMillis> {
        self.int("ex")
    }

    /// The raw record stored for `key`, each field `None` when missing or unreadable.
    ///
    /// # Errors
    /// [`crate::RedisStoreError::Corrupt`] when the scope stored in the hash is not `key`'s.
    pub(crate) fn into_raw(mut self, key: &ScopedKey) -> Result<RawRecord> {
        let scope = (self.get("p"), self.get("r"), self.get("k"));
        let expected = (
            Some(key.principal.as_bytes()),
            Some(key.route.as_bytes()),
            Some(key.key.as_str().as_bytes()),
        );
        if scope != expected {
            return Err(corrupt(
                "the record stored under this key has another scope",
            ));
        }
        Ok(RawRecord {
            key: key.clone(),
            fingerprint_version: self.int("fv"),
            fingerprint_digest: self.take("fd"),
            state: self.take("st").and_then(|s| String::from_utf8(s).ok()),
            fence: self.int("fe"),
            lease_token: self.int("lt"),
            lease_expires_at: self.int("le"),
            created_at: self.int("ca"),
            completed_at: self.int("co"),
            expires_at: self.int("ex"),
            status: self.int("rs"),
            replayable: match self.get("rr") {
                Some(b"1") => Some(true),
                Some(b"0") => Some(false),
                _ => None,
            },
            headers: self.take("rh").map(Bytes::from),
            body: self.take("rb").map(Bytes::from),
            checksum: self.take("cs"),
            // Not UTF-8: an empty id, which never parses (corrupt).
            sealed_by: self
                .take("ki")
                .map(|id| String::from_utf8(id).unwrap_or_default()),
        })
    }

    /// Decodes and validates the record stored for `key`.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when the record belongs to another scope or fails
    /// [`RawRecord::validate`] (a missing or unreadable field, an unknown state, a
    /// completed record without its status, headers or body, a checksum that does not
    /// match).
    pub(crate) fn into_record(self, key: &ScopedKey) -> Result<IdempotencyRecord, StoreError> {
        self.into_raw(key)?.validate()
    }
}

/// The bytes of a bulk or simple string reply.
pub(crate) fn bytes(v: Value) -> Result<Vec<u8>> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.into_bytes()),
        other => Err(unexpected(format!("expected a string, got {other:?}"))),
    }
}

/// The integer of an integer reply.
pub(crate) fn int(v: &Value) -> Result<i64> {
    match v {
        Value::Int(n) => Ok(*n),
        other => Err(unexpected(format!("expected an integer, got {other:?}"))),
    }
}

/// The items of an array reply.
pub(crate) fn array(v: Value) -> Result<Vec<Value>> {
    match v {
        Value::Array(items) => Ok(items),
        other => Err(unexpected(format!("expected an array, got {other:?}"))),
    }
}

#[cfg(test)]
mod tests;
