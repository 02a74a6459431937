//! Version 1, as released before version 2: kept byte for byte, so a retry of a request
//! recorded by that release is still recognised (pinned by test vectors in `vectors.rs`).
//!
//! The media type without its parameters; canonical JSON, sorted form pairs or raw bytes;
//! a gzip body decoded by its **first member only**, up to `max_decoded_bytes` (above, or
//! undecodable: hashed as received with its encoding). Version 2 fixes both gaps.

use flate2::read::GzDecoder;

use super::{body_fields, gunzip, request_line, sorted_pairs, Form};
use super::{FingerprintInput, FingerprintOptions};
use crate::canonical::canonical_json;

/// The version 1 digest of `input`.
pub(super) fn digest(input: &FingerprintInput<'_>, opts: &FingerprintOptions<'_>) -> [u8; 32] {
    let h = request_line(b"idemgate-fingerprint-v1", input, sorted_pairs);
    let max = opts.max_decoded_bytes;
    // The first member only; past `max`, or undecodable: hashed as received.
    let decoded = gunzip(input, max, GzDecoder::new)
        .and_then(|(out, ok)| (ok && out.len() <= max).then_some(out));
    let form = |body: &[u8]| body_form(input, body, opts);
    body_fields(h, input, decoded.as_deref(), form)
}

/// The media field (the media type without its parameters, lower-cased; empty without
/// `Content-Type`) and the canonical body: JSON, sorted form pairs, or none.
fn body_form(input: &FingerprintInput<'_>, body: &[u8], opts: &FingerprintOptions<'_>) -> Form {
    let media = input.content_type.map_or(String::new(), |ct| {
        ct.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    });
    let canonical = match media.as_str() {
        m if m == "application/json" || m.ends_with("+json") => {
            canonical_json(body, opts.ignore_json_pointers).map(|c| (b'J', c))
        }
        "application/x-www-form-urlencoded" => Some((b'F', sorted_pairs(body))),
        _ => None,
    };
    (media.into_bytes(), canonical)
}
