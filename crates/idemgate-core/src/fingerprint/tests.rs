//! Fingerprint behaviour of the current version.

use std::io::Write;

use super::*;

pub(super) fn input<'a>(ct: Option<&'a str>, body: &'a [u8]) -> FingerprintInput<'a> {
    FingerprintInput {
        method: "POST",
        route: "POST /payments",
        path: "/payments",
        query: None,
        content_type: ct,
        content_encoding: None,
        headers: &[],
        body,
    }
}

pub(super) fn fp(i: &FingerprintInput<'_>) -> Fingerprint {
    Fingerprint::compute(i, &FingerprintOptions::default()).unwrap()
}

pub(super) fn gzip(members: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in members {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(m).unwrap();
        out.extend(enc.finish().unwrap());
    }
    out
}

const JSON: Option<&str> = Some("application/json; charset=utf-8");

#[test]
fn json_order_whitespace_and_escapes_do_not_matter() {
    let a = fp(&input(JSON, br#"{"amount":10,"name":"\u00e9"}"#));
    assert_eq!(
        a,
        fp(&input(
            JSON,
            r#" { "name" : "é", "amount" : 10 } "#.as_bytes()
        ))
    );
    assert_ne!(
        a,
        fp(&input(
            Some("application/problem+json"),
            r#"{"name":"é","amount":10}"#.as_bytes()
        ))
    );
    assert_ne!(
        a,
        fp(&input(JSON, r#"{"amount":11,"name":"é"}"#.as_bytes()))
    );
}

#[test]
fn lossy_json_is_hashed_raw() {
    let big = |t: &'static [u8]| fp(&input(JSON, t));
    assert_ne!(
        big(b"{\"a\":9007199254740993}"),
        big(b"{\"a\":9007199254740992}")
    );
    assert_ne!(big(b"{\"a\":1,\"a\":2}"), big(b"{\"a\":2}"));
    assert_ne!(big(b"{\"a\":1,\"a\":2}"), big(b"{\"a\":1}"));
    assert_ne!(big(b"{\"a\":1,\"a\":2}"), big(b"{\"a\":2,\"a\":1}"));
    // raw hashing is byte-exact, so whitespace matters there
    assert_ne!(big(b"{\"a\":1,\"a\":2}"), big(b"{\"a\":1, \"a\":2}"));
}

#[test]
fn non_json_is_raw_and_form_is_sorted() {
    assert_ne!(fp(&input(None, b"a b")), fp(&input(None, b"a  b")));
    let form = Some("application/x-www-form-urlencoded");
    assert_eq!(fp(&input(form, b"b=2&a=1")), fp(&input(form, b"a=1&b=2")));
    assert_ne!(fp(&input(form, b"a=1&a=2")), fp(&input(form, b"a=2&a=1")));
    // the same bytes under different media types are different requests
    assert_ne!(fp(&input(form, b"a=1")), fp(&input(None, b"a=1")));
    let raw = br#"{"a":1,"a":2}"#;
    assert_ne!(fp(&input(Some("text/plain"), raw)), fp(&input(JSON, raw)));
    assert_ne!(
        fp(&input(None, b"x")),
        fp(&input(Some("application/octet-stream"), b"x"))
    );
    assert_eq!(
        fp(&input(Some("Application/JSON; charset=utf-8"), b"{}")),
        fp(&input(Some("application/json"), b"{}"))
    );
}

#[test]
fn every_request_part_counts() {
    let base = input(JSON, b"{}");
    let a = fp(&base);
    assert_ne!(
        a,
        fp(&FingerprintInput {
            method: "PATCH",
            ..base
        })
    );
    assert_ne!(
        a,
        fp(&FingerprintInput {
            route: "POST /refunds",
            ..base
        })
    );
    assert_ne!(
        a,
        fp(&FingerprintInput {
            path: "/payments/",
            ..base
        })
    );
    assert_ne!(
        a,
        fp(&FingerprintInput {
            query: Some(""),
            ..base
        })
    );
    let q = |q| {
        fp(&FingerprintInput {
            query: Some(q),
            ..base
        })
    };
    assert_eq!(q("b=2&a=1"), q("a=1&b=2"));
    assert_ne!(q("a=1&b=2"), q("a=1&b=3"));
    let headers: &[(&str, &[u8])] = &[("x-tenant", b"7")];
    assert_ne!(a, fp(&FingerprintInput { headers, ..base }));
}

#[test]
fn gzip_bodies_are_fingerprinted_decoded() {
    let gz = gzip(&[br#"{"b":1,"a":2}"#]);
    let zipped = FingerprintInput {
        content_encoding: Some("gzip"),
        ..input(JSON, &gz)
    };
    assert_eq!(fp(&zipped), fp(&input(JSON, br#"{"a":2,"b":1}"#)));
    let broken = FingerprintInput {
        content_encoding: Some("gzip"),
        ..input(JSON, b"not gzip")
    };
    assert_ne!(fp(&broken), fp(&input(JSON, b"not gzip")));
}

fn gzipped<'a>(body: &'a [u8]) -> FingerprintInput<'a> {
    FingerprintInput {
        content_encoding: Some("gzip"),
        ..input(JSON, body)
    }
}

#[test]
fn every_gzip_member_counts() {
    let one = gzip(&[br#"{"a":1}"#]);
    let two = gzip(&[br#"{"a":1}"#, b"2"]);
    let other = gzip(&[br#"{"a":1}"#, b"3"]);
    assert_ne!(fp(&gzipped(&one)), fp(&gzipped(&two)));
    assert_ne!(fp(&gzipped(&two)), fp(&gzipped(&other)));
    // two members are read as their concatenation, like one member holding it
    let halves = gzip(&[br#"{"a":"#, b"1}"]);
    assert_eq!(fp(&gzipped(&halves)), fp(&gzipped(&one)));
    assert_eq!(fp(&gzipped(&halves)), fp(&input(JSON, br#"{"a":1}"#)));
}

#[test]
fn gzip_with_trailing_bytes_is_hashed_as_received() {
    let one = gzip(&[br#"{"a":1}"#]);
    let trailing = |t: &[u8]| [&one[..], t].concat();
    let (a, b) = (trailing(b"x"), trailing(b"y"));
    assert_ne!(fp(&gzipped(&a)), fp(&gzipped(&b)));
    assert_ne!(fp(&gzipped(&a)), fp(&gzipped(&one)));
    assert_eq!(fp(&gzipped(&a)), fp(&gzipped(&a.clone())));
    let truncated = &one[..one.len() - 3];
    assert_ne!(fp(&gzipped(truncated)), fp(&gzipped(&one)));
}

#[test]
fn decoding_stops_at_the_cap() {
    let bomb = gzip(&[&vec![b'a'; 64 << 10]]);
    let opts = |max| FingerprintOptions {
        ignore_json_pointers: &[],
        max_decoded_bytes: max,
    };
    let i = gzipped(&bomb);
    assert_eq!(
        Fingerprint::compute(&i, &opts(1000)),
        Err(FingerprintError::DecodedTooLarge { limit: 1000 })
    );
    assert!(Fingerprint::compute(&i, &opts(64 << 10)).is_ok());
    // version 1 keeps hashing such a body as received
    assert!(Fingerprint::compute_version(1, &i, &opts(1000)).is_ok());
    assert_eq!(
        Fingerprint::compute_version(7, &i, &opts(1000)),
        Err(FingerprintError::UnknownVersion(7))
    );
}

#[test]
fn parameters_that_change_the_reading_count() {
    let raw = |ct| fp(&input(Some(ct), b"caf\xe9"));
    assert_ne!(raw("text/plain"), raw("text/plain; charset=latin1"));
    assert_ne!(
        raw("text/plain; charset=latin1"),
        raw("text/plain; charset=utf-8")
    );
    assert_eq!(
        raw("text/plain; charset=UTF-8"),
        raw("Text/Plain;charset=\"utf-8\"")
    );
    assert_ne!(
        raw("text/plain; charset=latin1"),
        raw("text/plain; charset=latin1;;x")
    );
    let form = |ct| fp(&input(Some(ct), b"b=2&a=1"));
    assert_ne!(
        form("application/x-www-form-urlencoded"),
        form("application/x-www-form-urlencoded; charset=iso-8859-1")
    );
    // JSON is UTF-8 (RFC 8259 §8.1); another charset is a raw, different request
    let json = |ct| fp(&input(Some(ct), br#"{"a":1}"#));
    assert_eq!(
        json("application/json"),
        json("application/json; charset=utf-8")
    );
    assert_ne!(
        json("application/json"),
        json("application/json; charset=utf-16")
    );
    assert_ne!(
        json("application/json"),
        json("application/json; profile=x")
    );
}

#[test]
fn a_content_type_that_does_not_parse_counts_as_received() {
    let ct = |ct| fp(&input(Some(ct), br#"{"a":1}"#));
    assert_ne!(ct("application/json; a"), ct("application/json; b"));
    assert_ne!(ct("application/json; a"), ct("application/json"));
    assert_ne!(ct(""), fp(&input(None, br#"{"a":1}"#)));
    // not canonicalized: whitespace counts
    assert_ne!(
        fp(&input(Some("application/json; a"), br#"{"a":1}"#)),
        fp(&input(Some("application/json; a"), br#"{"a": 1}"#))
    );
}

fn form(boundary: &str, parts: &[&str]) -> (String, Vec<u8>) {
    let mut body = String::new();
    for p in parts {
        body += &format!("--{boundary}\r\n{p}\r\n");
    }
    body += &format!("--{boundary}--\r\n");
    (
        format!("multipart/form-data; boundary={boundary}"),
        body.into_bytes(),
    )
}

fn form_fp(boundary: &str, parts: &[&str]) -> Fingerprint {
    let (ct, body) = form(boundary, parts);
    fp(&input(Some(&ct), &body))
}

const PART_A: &str = "Content-Disposition: form-data; name=\"a\"\r\n\r\n1";
const FILE: &str = "Content-Disposition: form-data; name=\"f\"; filename=\"x.txt\"\r\nContent-Type: text/plain\r\n\r\nhello\r\nworld";

#[test]
fn multipart_forms_are_compared_by_their_parts() {
    let a = form_fp("XyZ", &[PART_A, FILE]);
    assert_eq!(
        a,
        form_fp("------------------------d74496d66958873e", &[PART_A, FILE])
    );
    assert_ne!(a, form_fp("XyZ", &[FILE, PART_A]), "order counts");
    assert_ne!(a, form_fp("XyZ", &[PART_A]));
    assert_ne!(
        a,
        form_fp("XyZ", &[PART_A, &FILE.replace("x.txt", "y.txt")])
    );
    assert_ne!(
        a,
        form_fp("XyZ", &[PART_A, &FILE.replace("text/plain", "text/csv")])
    );
    assert_ne!(
        a,
        form_fp("XyZ", &[PART_A, &FILE.replace("hello", "hellO")])
    );
    assert_ne!(
        a,
        form_fp("XyZ", &[PART_A, &FILE.replace("name=\"f\"", "name=\"g\"")])
    );
    let extra = FILE.replace("\r\n\r\n", "\r\nContent-Transfer-Encoding: 8bit\r\n\r\n");
    assert_ne!(a, form_fp("XyZ", &[PART_A, &extra]));
    // header names and order, and quoting of a token value, do not change the reading
    let same = "content-type: text/plain\r\nCONTENT-DISPOSITION: form-data; filename=x.txt; name=f\r\n\r\nhello\r\nworld";
    assert_eq!(a, form_fp("XyZ", &[PART_A, same]));
    // preamble and epilogue are not read
    let (ct, body) = form("XyZ", &[PART_A, FILE]);
    let wrapped = [&b"preamble\r\n"[..], &body, b"epilogue"].concat();
    assert_eq!(a, fp(&input(Some(&ct), &wrapped)));
}

#[test]
fn identical_bytes_under_another_boundary_are_another_request() {
    // one body, two boundaries: split at "--B" it is one form, at "--Bx" another
    let body = b"--Bx\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--Bx--\r\n";
    let under = |b: &str| {
        fp(&input(
            Some(&format!("multipart/form-data; boundary={b}")),
            body,
        ))
    };
    assert_ne!(under("Bx"), under("B"));
    assert_ne!(under("B"), under("C"));
}

#[test]
fn a_form_that_does_not_parse_strictly_is_hashed_raw_with_its_boundary() {
    let bad = [
        // a delimiter after a bare LF, which lenient parsers accept
        "--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\n--B\r\nContent-Disposition: form-data; name=\"b\"\r\n\r\n2\r\n--B--",
        // no close delimiter
        "--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n",
        // a part without a name
        "--B\r\nContent-Disposition: form-data\r\n\r\n1\r\n--B--",
        // a folded header
        "--B\r\nContent-Disposition: form-data;\r\n name=\"a\"\r\n\r\n1\r\n--B--",
        // a header line ending in a bare LF
        "--B\r\nContent-Disposition: form-data; name=\"a\"\nX: y\r\n\r\n1\r\n--B--",
        // two dispositions
        "--B\r\nContent-Disposition: form-data; name=\"a\"\r\nContent-Disposition: form-data; name=\"b\"\r\n\r\n1\r\n--B--",
        // transport padding after a delimiter
        "--B \r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--B--",
        // a quoted-pair in a name
        "--B\r\nContent-Disposition: form-data; name=\"a\\b\"\r\n\r\n1\r\n--B--",
        // something after the close delimiter on its line
        "--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--B--x",
    ];
    for body in bad {
        assert_eq!(
            super::multipart::canonical_form_data(body.as_bytes(), b"B"),
            None,
            "{body:?}"
        );
        let under = |b| fp(&input(Some(b), body.as_bytes()));
        assert_ne!(
            under("multipart/form-data; boundary=B"),
            under("multipart/form-data; boundary=C"),
            "{body:?}"
        );
    }
    let good = "--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--B--";
    assert!(super::multipart::canonical_form_data(good.as_bytes(), b"B").is_some());
    assert_eq!(
        super::multipart::canonical_form_data(good.as_bytes(), b""),
        None
    );
}

#[test]
fn encoded_multipart_is_decoded_first() {
    let (ct, body) = form("XyZ", &[PART_A, FILE]);
    let (ct2, body2) = form("other", &[PART_A, FILE]);
    let gz = gzip(&[&body]);
    let zipped = FingerprintInput {
        content_encoding: Some("gzip"),
        ..input(Some(&ct), &gz)
    };
    assert_eq!(fp(&zipped), fp(&input(Some(&ct2), &body2)));
}
