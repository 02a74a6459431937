//! Request fingerprints (`Fingerprint::compute`, the public API only) over gzip and
//! multipart bodies, JSON, forms and raw bytes.
//!
//! Input: byte 0 picks the `Content-Type` (bits 0-2), the `Content-Encoding` (bits 3-4:
//! none, `gzip` over a valid gzip of the body, `gzip` over the body as is, `x-gzip` over a
//! valid gzip) and the compression level (bits 5-7); for multipart types the next line is
//! the boundary; the rest is the body.
//! Properties: no panic; a fingerprint is deterministic; a gzip body has the fingerprint of
//! its decoded bytes sent unencoded, whatever the compression level; a JSON body has the
//! fingerprint of its canonical form.
#![no_main]

use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use idemgate_core::canonical::canonical_json;
use idemgate_core::fingerprint::{Fingerprint, FingerprintInput, FingerprintOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let (content_type, body) = content_type(flags & 7, rest);
    let opts = FingerprintOptions::default();
    let plain = request(content_type.as_deref(), None, body);
    let fp = Fingerprint::compute(&plain, &opts);
    assert_eq!(fp, Fingerprint::compute(&plain, &opts), "deterministic");

    match (flags >> 3) & 3 {
        1 | 3 => {
            let encoding = if (flags >> 3) & 3 == 1 {
                "gzip"
            } else {
                " X-GZIP "
            };
            let level = match flags >> 5 {
                0 => Compression::none(),
                1..=3 => Compression::fast(),
                _ => Compression::best(),
            };
            let zipped = gzip(body, level);
            let input = request(content_type.as_deref(), Some(encoding), &zipped);
            let zfp = Fingerprint::compute(&input, &opts);
            assert_eq!(zfp, Fingerprint::compute(&input, &opts), "deterministic");
            assert_eq!(zfp, fp, "a gzip body is fingerprinted decoded");
        }
        2 => {
            let input = request(content_type.as_deref(), Some("gzip"), body);
            let a = Fingerprint::compute(&input, &opts);
            assert_eq!(a, Fingerprint::compute(&input, &opts), "deterministic");
        }
        _ => {}
    }

    if matches!(flags & 7, 1 | 2) {
        if let Some(canonical) = canonical_json(body, &[]) {
            let input = request(content_type.as_deref(), None, &canonical);
            assert_eq!(
                Fingerprint::compute(&input, &opts),
                fp,
                "a JSON body has the fingerprint of its canonical form"
            );
        }
    }
});

/// The `Content-Type` for `choice`, and the body (after the boundary line, for multipart).
fn content_type(choice: u8, rest: &[u8]) -> (Option<String>, &[u8]) {
    let multipart = |template: &str| {
        let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
        let boundary = String::from_utf8_lossy(&rest[..end]);
        let body = rest.get(end + 1..).unwrap_or_default();
        (Some(template.replace("{}", &boundary)), body)
    };
    match choice {
        0 => (None, rest),
        1 => (Some("application/json".into()), rest),
        2 => (
            Some("application/merge-patch+json; charset=utf-8".into()),
            rest,
        ),
        3 => (Some("application/x-www-form-urlencoded".into()), rest),
        4 => multipart("multipart/form-data; boundary={}"),
        5 => multipart("Multipart/Form-Data; charset=utf-8; boundary=\"{}\""),
        6 => multipart("multipart/form-data;boundary={} ; x=y"),
        _ => (Some("text/plain".into()), rest),
    }
}

fn request<'a>(
    content_type: Option<&'a str>,
    content_encoding: Option<&'a str>,
    body: &'a [u8],
) -> FingerprintInput<'a> {
    FingerprintInput {
        method: "POST",
        route: "POST /uploads/{id}",
        path: "/uploads/7",
        query: Some("b=2&a=1"),
        content_type,
        content_encoding,
        headers: &[("x-tenant", b"t1")],
        body,
    }
}

fn gzip(body: &[u8], level: Compression) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::new(), level);
    enc.write_all(body).expect("writing to a Vec");
    enc.finish().expect("writing to a Vec")
}
