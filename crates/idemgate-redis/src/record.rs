//! Decoding the fields of a record hash (see `scripts/common.lua` for the layout).

use bytes::Bytes;
use idemgate_core::fingerprint::Fingerprint;
use idemgate_core::{
    IdempotencyRecord, LeaseToken, RecordState, ScopedKey, StoredResponse, UnixMillis,
};
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

    /// True when the record does not exist.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn get(&self, name: &str) -> Option<&[u8]> {
        self.0
            .iter()
            .find(|(f, _)| f == name.as_bytes())
            .map(|(_, v)| v.as_slice())
    }

    fn take(&mut self, name: &str) -> Option<Vec<u8>> {
        let i = self.0.iter().position(|(f, _)| f == name.as_bytes())?;
        Some(self.0.swap_remove(i).1)
    }

    fn text(&self, name: &str) -> Result<&str> {
        let raw = self
            .get(name)
            .ok_or_else(|| corrupt(format!("field `{name}` is missing")))?;
        std::str::from_utf8(raw).map_err(|_| corrupt(format!("field `{name}` is not UTF-8")))
    }

    fn int<T: std::str::FromStr>(&self, name: &str) -> Result<T> {
        let text = self.text(name)?;
        text.parse()
            .map_err(|_| corrupt(format!("field `{name}` is not an integer: {text:?}")))
    }

    /// An optional integer: `None` when missing or unreadable.
    fn opt_int<T: std::str::FromStr>(&self, name: &str) -> Option<T> {
        std::str::from_utf8(self.get(name)?).ok()?.parse().ok()
    }

    /// The expiry (`ex`), if readable.
    pub(crate) fn expires_at(&self) -> Option<UnixMillis> {
        self.opt_int("ex")
    }

    /// Decodes the record stored for `key`.
    ///
    /// # Errors
    /// [`RedisStoreError::Corrupt`] when a field is missing or does not decode, the record
    /// belongs to another scope, or a completed record has no status.
    pub(crate) fn into_record(mut self, key: &ScopedKey) -> Result<IdempotencyRecord> {
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
        let digest = self.get("fd").unwrap_or_default();
        let fingerprint = Fingerprint {
            version: self.int("fv")?,
            digest: digest.try_into().map_err(|_| {
                corrupt(format!(
                    "fingerprint digest is {} bytes, not 32",
                    digest.len()
                ))
            })?,
        };
        let state = self.text("st")?;
        let state =
            RecordState::parse(state).ok_or_else(|| corrupt(format!("unknown state {state:?}")))?;
        let response = match state {
            RecordState::Completed => Some(self.response()?),
            _ => None,
        };
        Ok(IdempotencyRecord {
            key: key.clone(),
            fingerprint,
            state,
            fence: self.int("fe")?,
            lease_token: self.opt_int("lt").map(LeaseToken),
            lease_expires_at: self.opt_int("le"),
            created_at: self.int("ca")?,
            completed_at: self.opt_int("co"),
            expires_at: self.int("ex")?,
            response,
        })
    }

    fn response(&mut self) -> Result<StoredResponse> {
        let status = self
            .int("rs")
            .map_err(|_| corrupt("completed record without a readable status"))?;
        let replayable = match self.get("rr") {
            Some(b"1") => true,
            Some(b"0") => false,
            _ => return Err(corrupt("completed record without a readable `rr` flag")),
        };
        let headers = StoredResponse::decode_headers(self.get("rh").unwrap_or_default())
            .map_err(|e| corrupt(format!("response headers: {e}")))?;
        Ok(StoredResponse {
            status,
            headers,
            body: self.take("rb").map(Bytes::from).unwrap_or_default(),
            replayable,
        })
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
mod tests {
    use idemgate_core::IdempotencyKey;

    use super::*;
    use crate::error::RedisStoreError;

    fn key() -> ScopedKey {
        ScopedKey {
            principal: "alice".into(),
            route: "POST /payments".into(),
            key: IdempotencyKey::new("key-00000001").unwrap(),
        }
    }

    fn flat(pairs: &[(&str, &[u8])]) -> Value {
        Value::Array(
            pairs
                .iter()
                .flat_map(|(f, v)| {
                    [
                        Value::BulkString(f.as_bytes().to_vec()),
                        Value::BulkString(v.to_vec()),
                    ]
                })
                .collect(),
        )
    }

    fn base() -> Vec<(&'static str, &'static [u8])> {
        vec![
            ("p", b"alice"),
            ("r", b"POST /payments"),
            ("k", b"key-00000001"),
            ("fv", b"1"),
            ("fd", &[7; 32]),
            ("st", b"in_progress"),
            ("fe", b"3"),
            ("lt", b"-42"),
            ("le", b"2000"),
            ("ca", b"1000"),
            ("ex", b"87400000"),
        ]
    }

    #[test]
    fn decodes_an_in_progress_record() {
        let rec = Fields::from_value(flat(&base()))
            .unwrap()
            .into_record(&key())
            .unwrap();
        assert_eq!(rec.state, RecordState::InProgress);
        assert_eq!((rec.fence, rec.lease_token), (3, Some(LeaseToken(-42))));
        assert_eq!(rec.lease_expires_at, Some(2000));
        assert_eq!(rec.fingerprint.digest, [7; 32]);
        assert_eq!(rec.response, None);
    }

    #[test]
    fn an_unreadable_lease_reads_as_missing() {
        let mut fields = base();
        fields.retain(|(f, _)| *f != "le");
        fields.push(("le", b"soon"));
        let rec = Fields::from_value(flat(&fields))
            .unwrap()
            .into_record(&key())
            .unwrap();
        assert_eq!(rec.lease_expires_at, None);
    }

    #[test]
    fn broken_records_are_corrupt() {
        let cases: Vec<(&str, &[u8])> = vec![
            ("st", b"done"),
            ("fd", b"short"),
            ("fe", b"x"),
            ("p", b"bob"),
        ];
        for (field, value) in cases {
            let mut fields = base();
            fields.retain(|(f, _)| *f != field);
            fields.push((field, value));
            let err = Fields::from_value(flat(&fields))
                .unwrap()
                .into_record(&key())
                .unwrap_err();
            assert!(
                matches!(err, RedisStoreError::Corrupt { .. }),
                "{field}: {err}"
            );
        }
        let mut completed = base();
        completed.retain(|(f, _)| *f != "st");
        completed.push(("st", b"completed"));
        let err = Fields::from_value(flat(&completed))
            .unwrap()
            .into_record(&key())
            .unwrap_err();
        assert!(matches!(err, RedisStoreError::Corrupt { .. }));
    }
}
