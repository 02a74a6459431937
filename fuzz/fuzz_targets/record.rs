//! The record decoder every store goes through: `StoredResponse::decode_headers` (the
//! stored headers column) and `RawRecord::validate` (`idemgate_core::integrity`).
//!
//! Properties: no panic; headers that decode encode back to the same bytes; a record that
//! validates keeps the rules it promises (fence >= 1, a storable status, no body when not
//! replayable, a lease only while in progress); a sealed completed record validates to its
//! own response, and after any damage it either fails validation or still yields exactly
//! that response for exactly that scope: a damaged record is never replayed.
#![no_main]

use bytes::Bytes;
use idemgate_core::fingerprint::{Fingerprint, CURRENT_VERSION};
use idemgate_core::integrity::{is_storable_status, RawRecord};
use idemgate_core::record::{RecordState, ScopedKey, StoredResponse};
use idemgate_core::{IdempotencyKey, IdempotencyRecord};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    headers_column: Vec<u8>,
    raw: Fields,
    response: Response,
    damage: Vec<Damage>,
}

/// Every field of a [`RawRecord`] as a store could read it.
#[derive(Arbitrary, Debug)]
struct Fields {
    fingerprint_version: Option<i64>,
    fingerprint_digest: Option<Vec<u8>>,
    state: Option<String>,
    fence: Option<i64>,
    lease_token: Option<i64>,
    lease_expires_at: Option<i64>,
    created_at: Option<i64>,
    completed_at: Option<i64>,
    expires_at: Option<i64>,
    status: Option<i64>,
    headers: Option<Vec<u8>>,
    body: Option<Vec<u8>>,
    replayable: Option<bool>,
    checksum: Option<Vec<u8>>,
    sealed_by: Option<String>,
}

#[derive(Arbitrary, Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    replayable: bool,
}

/// What a torn write, a bit flip or a wrong copy does to a stored record.
#[derive(Arbitrary, Debug)]
enum Damage {
    Status(Option<i64>),
    Headers(Option<Vec<u8>>),
    Body(Option<Vec<u8>>),
    Replayable(Option<bool>),
    FlipHeaders(usize, u8),
    FlipBody(usize, u8),
    TruncateHeaders(usize),
    TruncateBody(usize),
    Checksum(Option<Vec<u8>>),
    State(Option<String>),
    Principal(String),
    SealedBy(Option<String>),
}

fuzz_target!(|input: Input| {
    headers_round_trip(&input.headers_column);
    any_record(input.raw);
    sealed_record(input.response, &input.damage);
});

fn scoped(principal: String) -> ScopedKey {
    ScopedKey {
        principal,
        route: "POST /payments".into(),
        key: IdempotencyKey::new("fuzz-key-0001").expect("a valid key"),
    }
}

fn headers_round_trip(column: &[u8]) {
    if let Ok(headers) = StoredResponse::decode_headers(column) {
        let again = StoredResponse {
            status: 200,
            headers,
            body: Bytes::new(),
            replayable: true,
            sealed_by: None,
        };
        assert_eq!(
            again.encode_headers(),
            column,
            "headers re-encode as stored"
        );
    }
}

fn any_record(f: Fields) {
    let raw = RawRecord {
        key: scoped("alice".into()),
        fingerprint_version: f.fingerprint_version,
        fingerprint_digest: f.fingerprint_digest,
        state: f.state,
        fence: f.fence,
        lease_token: f.lease_token,
        lease_expires_at: f.lease_expires_at,
        created_at: f.created_at,
        completed_at: f.completed_at,
        expires_at: f.expires_at,
        status: f.status,
        headers: f.headers.map(Bytes::from),
        body: f.body.map(Bytes::from),
        replayable: f.replayable,
        checksum: f.checksum,
        sealed_by: f.sealed_by,
    };
    let Ok(record) = raw.validate() else { return };
    assert!(record.fence >= 1);
    match (&record.state, &record.response) {
        (RecordState::Completed, Some(r)) => {
            assert!(is_storable_status(r.status));
            assert!(r.replayable || r.body.is_empty());
        }
        (RecordState::Completed, None) => panic!("a completed record without its response"),
        (_, Some(_)) => panic!("a response on a record that is not completed"),
        _ => {}
    }
    if record.state != RecordState::InProgress {
        assert_eq!(record.lease_token, None);
        assert_eq!(record.lease_expires_at, None);
    }
}

fn sealed_record(r: Response, damage: &[Damage]) {
    let response = StoredResponse {
        status: r.status,
        headers: r
            .headers
            .into_iter()
            .map(|(n, v)| (n, Bytes::from(v)))
            .collect(),
        body: if r.replayable {
            Bytes::from(r.body)
        } else {
            Bytes::new()
        },
        replayable: r.replayable,
        sealed_by: None,
    };
    let key = scoped("alice".into());
    let fingerprint = Fingerprint {
        version: CURRENT_VERSION,
        digest: [7; 32],
    };
    let mut raw = RawRecord::completed(&key, fingerprint, 1, 1_000, 2_000, &response);
    match raw.clone().validate() {
        Ok(rec) => assert_eq!(rec.response.as_ref(), Some(&response), "sealed round trip"),
        Err(_) => {
            // Refused on read exactly when it could not have been written: a status or a
            // header field (name, control characters) no store keeps.
            assert!(
                idemgate_core::integrity::check_storable(&response).is_err(),
                "a sealed record was refused"
            );
            return;
        }
    }
    let sealed = raw.checksum.clone();
    for d in damage {
        apply(&mut raw, d);
    }
    // A record written before checksums (or with another checksum) is checked by the other
    // rules only; the property below is about the original seal.
    if raw.checksum != sealed {
        return;
    }
    // A damaged state may leave a record without a response (in progress, failed): never
    // replayed. Whatever response is replayed must be the sealed one, in its own scope.
    if let Ok(IdempotencyRecord {
        key: got_key,
        response: Some(got),
        ..
    }) = raw.validate()
    {
        assert_eq!(
            got_key, key,
            "a sealed response validated under another scope"
        );
        assert_eq!(got, response, "damage replayed");
    }
}

fn apply(raw: &mut RawRecord, d: &Damage) {
    let flip = |b: &Option<Bytes>, i: usize, x: u8| {
        b.as_ref().map(|b| {
            let mut v = b.to_vec();
            if !v.is_empty() {
                let at = i % v.len();
                v[at] ^= x;
            }
            Bytes::from(v)
        })
    };
    let cut = |b: &Option<Bytes>, n: usize| b.as_ref().map(|b| b.slice(..n.min(b.len())));
    match d {
        Damage::Status(s) => raw.status = *s,
        Damage::Headers(h) => raw.headers = h.clone().map(Bytes::from),
        Damage::Body(b) => raw.body = b.clone().map(Bytes::from),
        Damage::Replayable(r) => raw.replayable = *r,
        Damage::FlipHeaders(i, x) => raw.headers = flip(&raw.headers, *i, *x),
        Damage::FlipBody(i, x) => raw.body = flip(&raw.body, *i, *x),
        Damage::TruncateHeaders(n) => raw.headers = cut(&raw.headers, *n),
        Damage::TruncateBody(n) => raw.body = cut(&raw.body, *n),
        Damage::Checksum(c) => raw.checksum = c.clone(),
        Damage::State(s) => raw.state = s.clone(),
        Damage::Principal(p) => raw.key.principal = p.clone(),
        Damage::SealedBy(k) => raw.sealed_by = k.clone(),
    }
}
