//! Version 1, as released before version 2: kept byte for byte, so a retry of a request
//! recorded by that release is still recognised (pinned by test vectors in `vectors.rs`).
//!
//! The media type without its parameters; canonical JSON, sorted form pairs or raw bytes;
//! a gzip body decoded by its **first member only**, up to `max_decoded_bytes` (above, or
//! undecodable: hashed as received with its encoding). Version 2 fixes both gaps.

use std::io::Read;

use sha2::{Digest, Sha256};

use super::{field, request_line, sorted_pairs, FingerprintInput, FingerprintOptions};
use crate::canonical::canonical_json;

/// The version 1 digest of `input`.
pub(super) fn digest(input: &FingerprintInput<'_>, opts: &FingerprintOptions<'_>) -> [u8; 32] {
    let mut h = Sha256::new();
    field(&mut h, b"idemgate-fingerprint-v1");
    request_line(&mut h, input, sorted_pairs);
    let decoded = decode_first_member(input, opts.max_decoded_bytes);
    let body = decoded.as_deref().unwrap_or(input.body);
    // An encoding left undecoded is part of what the upstream reads.
    let encoding = match (&decoded, input.content_encoding) {
        (None, Some(e)) => e.trim().as_bytes(),
        _ => b"identity",
    };
    field(&mut h, encoding);
    let media = input.content_type.map(|ct| {
        ct.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    });
    field(&mut h, media.as_deref().unwrap_or("").as_bytes());
    let canonical = match media.as_deref() {
        Some(m) if m == "application/json" || m.ends_with("+json") => {
            canonical_json(body, opts.ignore_json_pointers).map(|c| (b'J', c))
        }
        Some("application/x-www-form-urlencoded") => Some((b'F', sorted_pairs(body))),
        _ => None,
    };
    match &canonical {
        Some((kind, bytes)) => {
            field(&mut h, &[*kind]);
            field(&mut h, bytes);
        }
        None => {
            field(&mut h, b"R");
            field(&mut h, body);
        }
    }
    h.finalize().into()
}

fn decode_first_member(input: &FingerprintInput<'_>, max: usize) -> Option<Vec<u8>> {
    let encoding = input.content_encoding?.trim();
    if !encoding.eq_ignore_ascii_case("gzip") && !encoding.eq_ignore_ascii_case("x-gzip") {
        return None;
    }
    let mut out = Vec::new();
    let mut reader = flate2::read::GzDecoder::new(input.body).take(max as u64 + 1);
    reader.read_to_end(&mut out).ok()?;
    (out.len() <= max).then_some(out)
}
