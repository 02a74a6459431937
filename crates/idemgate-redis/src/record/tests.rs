use idemgate_core::integrity::response_checksum;
use idemgate_core::{IdempotencyKey, LeaseToken, RecordState, StoredResponse};

use super::*;

fn key() -> ScopedKey {
    ScopedKey {
        principal: "alice".into(),
        route: "POST /payments".into(),
        key: IdempotencyKey::new("key-00000001").unwrap(),
    }
}

fn flat(pairs: &[(&str, Vec<u8>)]) -> Value {
    Value::Array(
        pairs
            .iter()
            .flat_map(|(f, v)| {
                [
                    Value::BulkString(f.as_bytes().to_vec()),
                    Value::BulkString(v.clone()),
                ]
            })
            .collect(),
    )
}

fn base() -> Vec<(&'static str, Vec<u8>)> {
    let fields: [(&str, &[u8]); 11] = [
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
    ];
    fields.iter().map(|(f, v)| (*f, v.to_vec())).collect()
}

fn response(body: &'static [u8]) -> StoredResponse {
    StoredResponse {
        status: 201,
        headers: vec![("location".into(), Bytes::from_static(b"/p/1"))],
        body: Bytes::from_static(body),
        replayable: true,
        sealed_by: None,
    }
}

/// A completed record as `complete.lua` writes it, with or without its checksum.
fn completed(resp: &StoredResponse, checksum: bool) -> Vec<(&'static str, Vec<u8>)> {
    let mut fields = base();
    fields.retain(|(f, _)| !matches!(*f, "st" | "lt" | "le"));
    fields.extend([
        ("st", b"completed".to_vec()),
        ("co", b"1500".to_vec()),
        ("rs", resp.status.to_string().into_bytes()),
        ("rh", resp.encode_headers()),
        ("rb", resp.body.to_vec()),
        ("rr", if resp.replayable { b"1" } else { b"0" }.to_vec()),
    ]);
    if checksum {
        fields.push(("cs", response_checksum(&key(), resp).to_vec()));
    }
    fields
}

fn set(fields: &mut Vec<(&'static str, Vec<u8>)>, name: &'static str, value: Option<&[u8]>) {
    fields.retain(|(f, _)| *f != name);
    if let Some(v) = value {
        fields.push((name, v.to_vec()));
    }
}

/// The values of `fields` as `insert_or_get.lua`'s `HMGET` returns them.
fn positional(fields: &[(&str, Vec<u8>)]) -> Value {
    let value = |name: &str| {
        let found = fields.iter().find(|(f, _)| *f == name);
        found.map_or(Value::Nil, |(_, v)| Value::BulkString(v.clone()))
    };
    Value::Array(Fields::NAMES.iter().map(|n| value(n)).collect())
}

/// Decodes `fields` from an `HGETALL` reply, and checks the `HMGET` reply reads the same.
fn decode(fields: &[(&str, Vec<u8>)]) -> Result<IdempotencyRecord, StoreError> {
    let all = Fields::from_value(flat(fields))
        .unwrap()
        .into_record(&key());
    let listed = Fields::from_values(positional(fields))
        .unwrap()
        .into_record(&key());
    assert_eq!(format!("{all:?}"), format!("{listed:?}"), "{fields:?}");
    all
}

#[test]
fn an_hmget_reply_of_another_length_is_refused() {
    let short = Value::Array(vec![Value::Nil; Fields::NAMES.len() - 1]);
    assert!(Fields::from_values(short).is_err());
    assert!(Fields::from_values(Value::Nil).is_err());
}

#[test]
fn decodes_an_in_progress_record() {
    let rec = decode(&base()).unwrap();
    assert_eq!(rec.state, RecordState::InProgress);
    assert_eq!((rec.fence, rec.lease_token), (3, Some(LeaseToken(-42))));
    assert_eq!(rec.lease_expires_at, Some(2000));
    assert_eq!(rec.fingerprint.digest, [7; 32]);
    assert_eq!(rec.response, None);
}

#[test]
fn an_unreadable_lease_reads_as_missing() {
    let mut fields = base();
    set(&mut fields, "le", Some(b"soon"));
    assert_eq!(decode(&fields).unwrap().lease_expires_at, None);
}

#[test]
fn completed_records_decode_with_and_without_checksum() {
    for resp in [response(b"{\"id\":1}"), response(b"")] {
        for checksum in [true, false] {
            let rec = decode(&completed(&resp, checksum)).unwrap();
            assert_eq!(rec.response.as_ref(), Some(&resp), "checksum {checksum}");
            assert_eq!((rec.lease_token, rec.lease_expires_at), (None, None));
        }
    }
}

#[test]
fn broken_records_are_corrupt() {
    let cases: [(&str, Option<&[u8]>); 5] = [
        ("st", Some(b"done")),
        ("fd", Some(b"short")),
        ("fe", Some(b"x")),
        ("p", Some(b"bob")),
        ("ex", None),
    ];
    for (field, value) in cases {
        let mut fields = base();
        set(&mut fields, field, value);
        let err = decode(&fields).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{field}: {err}");
    }
    let mut no_response = base();
    set(&mut no_response, "st", Some(b"completed"));
    assert!(matches!(
        decode(&no_response),
        Err(StoreError::Corrupt { .. })
    ));
}

/// A completed record missing its body or headers is never replayed as empty, with or
/// without a checksum (records of the previous version have none); a truncated body or an
/// altered status is caught by the checksum.
#[test]
fn damaged_responses_are_corrupt() {
    let resp = response(b"{\"id\":1}");
    // (field, new value, refused even without a checksum)
    let cases: [(&str, Option<&[u8]>, bool); 7] = [
        ("rb", None, true),
        ("rh", None, true),
        ("rr", Some(b"yes"), true),
        ("rs", Some(b"1000"), true),
        ("cs", Some(&[0; 32]), true),
        ("rb", Some(b"{\"id\":"), false),
        ("rs", Some(b"200"), false),
    ];
    for checksum in [true, false] {
        for (field, value, always) in cases {
            let mut fields = completed(&resp, checksum);
            set(&mut fields, field, value);
            let outcome = decode(&fields);
            if checksum || always {
                assert!(
                    matches!(outcome, Err(StoreError::Corrupt { .. })),
                    "{field} (checksum {checksum}): {outcome:?}"
                );
            } else {
                assert!(outcome.is_ok(), "{field}: {outcome:?}");
            }
        }
    }
}
