use bytes::Bytes;

use super::*;
use crate::testing::{fp, response, unique_key};

fn completed() -> RawRecord {
    RawRecord::completed(&unique_key("alice"), fp(1), 3, 1_000, 90_000, &response(64))
}

fn corrupt(raw: RawRecord) -> String {
    match raw.validate() {
        Err(StoreError::Corrupt { detail }) => detail,
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn a_sealed_record_validates() {
    let rec = completed().validate().unwrap();
    assert_eq!(rec.state, RecordState::Completed);
    assert_eq!(rec.fence, 3);
    assert_eq!(rec.response.unwrap(), response(64));
}

#[test]
fn every_damage_is_refused() {
    type Edit = Box<dyn Fn(&mut RawRecord)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "truncated body",
            Box::new(|r| r.body = Some(Bytes::from_static(b"short"))),
        ),
        ("body missing", Box::new(|r| r.body = None)),
        ("headers missing", Box::new(|r| r.headers = None)),
        (
            "headers emptied",
            Box::new(|r| r.headers = Some(Bytes::new())),
        ),
        (
            "headers broken",
            Box::new(|r| r.headers = Some(Bytes::from_static(b"\0\0\0\x09ab"))),
        ),
        ("status 0", Box::new(|r| r.status = Some(0))),
        ("status 1000", Box::new(|r| r.status = Some(1000))),
        ("status 304", Box::new(|r| r.status = Some(304))),
        ("status 101", Box::new(|r| r.status = Some(101))),
        ("status changed", Box::new(|r| r.status = Some(200))),
        ("status missing", Box::new(|r| r.status = None)),
        ("replayable missing", Box::new(|r| r.replayable = None)),
        (
            "replayable flipped",
            Box::new(|r| r.replayable = Some(false)),
        ),
        (
            "checksum flipped",
            Box::new(|r| r.checksum.as_mut().unwrap()[0] ^= 1),
        ),
        (
            "checksum short",
            Box::new(|r| r.checksum = Some(vec![1, 2, 3])),
        ),
        ("state unknown", Box::new(|r| r.state = Some("done".into()))),
        ("state missing", Box::new(|r| r.state = None)),
        ("fence 0", Box::new(|r| r.fence = Some(0))),
        (
            "digest short",
            Box::new(|r| r.fingerprint_digest = Some(vec![1; 31])),
        ),
        (
            "version huge",
            Box::new(|r| r.fingerprint_version = Some(1 << 20)),
        ),
        ("expires_at missing", Box::new(|r| r.expires_at = None)),
        ("created_at missing", Box::new(|r| r.created_at = None)),
    ];
    for (name, damage) in cases {
        let mut raw = completed();
        damage(&mut raw);
        let detail = corrupt(raw);
        assert!(!detail.is_empty(), "{name}");
    }
}

#[test]
fn a_response_moved_to_another_record_fails_its_checksum() {
    let mut raw = completed();
    raw.key = unique_key("mallory");
    assert!(corrupt(raw).contains("checksum"));
}

#[test]
fn records_without_a_checksum_are_checked_by_the_other_rules() {
    let mut raw = completed();
    raw.checksum = None;
    assert!(raw.clone().validate().is_ok());
    raw.status = Some(99);
    corrupt(raw);
}

#[test]
fn in_progress_and_failed_need_no_response() {
    let key = unique_key("alice");
    let raw = RawRecord::in_progress(&key, fp(2), 1, LeaseToken(7), 5_000, 1_000, 9_000);
    let rec = raw.clone().validate().unwrap();
    assert_eq!(rec.lease_token, Some(LeaseToken(7)));
    assert_eq!(rec.lease_expires_at, Some(5_000));
    let mut failed = raw;
    failed.set_outcome(RecordState::Failed, None, 2_000);
    let rec = failed.validate().unwrap();
    assert_eq!(
        (rec.state, rec.lease_token, rec.response),
        (RecordState::Failed, None, None)
    );
}

#[test]
fn not_replayable_records_keep_no_body() {
    let key = unique_key("alice");
    let kept = StoredResponse {
        replayable: false,
        body: Bytes::new(),
        ..response(0)
    };
    let raw = RawRecord::completed(&key, fp(1), 1, 0, 10, &kept);
    assert!(!raw.clone().validate().unwrap().response.unwrap().replayable);
    let mut missing = raw.clone();
    missing.body = None;
    assert!(missing.validate().is_ok());
    let mut smuggled = raw;
    smuggled.body = Some(Bytes::from_static(b"x"));
    corrupt(smuggled);
}

#[test]
fn storable_statuses() {
    for s in [200, 201, 302, 404, 422, 599] {
        assert!(is_storable_status(s), "{s}");
    }
    for s in [0, 100, 101, 199, 304, 600, 1000] {
        assert!(!is_storable_status(s), "{s}");
    }
}

#[test]
fn a_304_is_kept_only_as_not_replayable() {
    let key = unique_key("alice");
    let not_modified = StoredResponse {
        status: 304,
        replayable: false,
        body: Bytes::new(),
        ..response(0)
    };
    assert_eq!(check_storable(&not_modified), Ok(()));
    let raw = RawRecord::completed(&key, fp(1), 1, 0, 10, &not_modified);
    let rec = raw.validate().unwrap().response.unwrap();
    assert_eq!((rec.status, rec.replayable), (304, false));
    let replayed = StoredResponse {
        replayable: true,
        ..not_modified
    };
    assert!(check_storable(&replayed).unwrap_err().contains("304"));
    let raw = RawRecord::completed(&key, fp(1), 1, 0, 10, &replayed);
    assert!(corrupt(raw).contains("status"));
}

/// Whatever `check_storable` accepts reads back through `validate`; what it refuses is named.
#[test]
fn check_storable_matches_validate() {
    let key = unique_key("alice");
    let ok = [
        response(64),
        StoredResponse {
            headers: vec![("x-bin".into(), Bytes::from_static(b"\xff\x80 obs-text"))],
            ..response(3)
        },
        StoredResponse {
            status: 599,
            ..response(0)
        },
    ];
    for r in ok {
        assert_eq!(check_storable(&r), Ok(()), "{r:?}");
        let raw = RawRecord::completed(&key, fp(1), 1, 0, 10, &r);
        assert_eq!(raw.validate().unwrap().response.unwrap(), r);
    }
    let refused = [
        (
            StoredResponse {
                status: 101,
                ..response(1)
            },
            "status 101",
        ),
        (
            StoredResponse {
                status: 600,
                replayable: false,
                body: Bytes::new(),
                ..response(0)
            },
            "status 600",
        ),
        (
            StoredResponse {
                replayable: false,
                ..response(4)
            },
            "holds a body",
        ),
        (
            StoredResponse {
                headers: vec![(String::new(), Bytes::from_static(b"v"))],
                ..response(1)
            },
            "not an HTTP token",
        ),
        (
            StoredResponse {
                headers: vec![("bad name\r\nx".into(), Bytes::from_static(b"v"))],
                ..response(1)
            },
            "not an HTTP token",
        ),
        (
            StoredResponse {
                headers: vec![("x-a".into(), Bytes::from_static(b"v\r\nset-cookie: a=1"))],
                ..response(1)
            },
            "control character",
        ),
        (
            StoredResponse {
                headers: vec![("x-a".into(), Bytes::from_static(b"v\0"))],
                ..response(1)
            },
            "control character",
        ),
        (
            StoredResponse {
                body: Bytes::from(vec![0; MAX_STORED_RESPONSE_BYTES]),
                ..response(0)
            },
            "exceed",
        ),
    ];
    for (r, why) in refused {
        let err = check_storable(&r).unwrap_err();
        assert!(err.contains(why), "{err} (wanted {why})");
    }
}

/// A record whose stored headers break HTTP's field syntax (written behind the store's back,
/// or by an older build) reads back as corrupt, never as a response to replay.
#[test]
fn a_stored_header_with_a_line_break_reads_back_as_corrupt() {
    let key = unique_key("alice");
    for headers in [
        vec![(
            "x-a".to_owned(),
            Bytes::from_static(b"v\r\nset-cookie: a=1"),
        )],
        vec![("bad name".to_owned(), Bytes::from_static(b"v"))],
    ] {
        let r = StoredResponse {
            headers,
            ..response(2)
        };
        let raw = RawRecord::completed(&key, fp(1), 1, 0, 10, &r);
        match raw.validate() {
            Err(StoreError::Corrupt { detail }) => assert!(detail.contains("stored headers")),
            other => panic!("a damaged header was accepted: {other:?}"),
        }
    }
}
