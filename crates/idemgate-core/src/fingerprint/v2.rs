//! Version 2: every gzip member decoded under a hard cap, media-type parameters that change
//! the reading of the body hashed, and `multipart/form-data` compared by its parts.

use flate2::read::MultiGzDecoder;

use super::media::{self, Params};
use super::multipart::canonical_form_data;
use super::pairs::folded_sorted_pairs;
use super::{body_fields, gunzip, request_line, Form};
use super::{FingerprintError, FingerprintInput, FingerprintOptions};
use crate::canonical::canonical_json;

/// The version 2 digest of `input`, or [`FingerprintError::DecodedTooLarge`].
pub(super) fn digest(
    input: &FingerprintInput<'_>,
    opts: &FingerprintOptions<'_>,
) -> Result<[u8; 32], FingerprintError> {
    let h = request_line(b"idemgate-fingerprint-v2", input, folded_sorted_pairs);
    let decoded = decode_all_members(input, opts.max_decoded_bytes)?;
    let form = |body: &[u8]| body_form(input.content_type, body, opts);
    Ok(body_fields(h, input, decoded.as_deref(), form))
}

/// A `gzip`/`x-gzip` body decoded in full, every member (RFC 1952 §2.2), reading at most
/// `max + 1` decoded bytes: `Ok(None)` when not gzip or undecodable (trailing bytes that
/// are not a member included), `Err` past `max`.
fn decode_all_members(
    input: &FingerprintInput<'_>,
    max: usize,
) -> Result<Option<Vec<u8>>, FingerprintError> {
    let Some((out, ok)) = gunzip(input, max, MultiGzDecoder::new) else {
        return Ok(None);
    };
    if out.len() > max {
        return Err(FingerprintError::DecodedTooLarge { limit: max });
    }
    Ok(ok.then_some(out))
}

/// The media-type field and the canonical body (kind, bytes), or `None` for raw bytes.
///
/// The media field is `-` without `Content-Type`, `?` and the value as received when it
/// does not parse strictly, or `P` and the normalised type with its parameters: all of
/// them, except `charset=utf-8` of JSON (RFC 8259 §8.1: JSON is UTF-8) and the `boundary`
/// of a multipart form that is compared by its parts.
fn body_form(content_type: Option<&str>, body: &[u8], opts: &FingerprintOptions<'_>) -> Form {
    let Some(ct) = content_type else {
        return (b"-".to_vec(), None);
    };
    let Some(m) = media::media_type(ct.as_bytes()) else {
        return ([b"?", ct.as_bytes()].concat(), None);
    };
    let tagged = |skip: &dyn Fn(&str, &[u8]) -> bool| [&b"P"[..], &m.encode(skip)].concat();
    let all = tagged(&|_, _| false);
    let essence = m.value.as_str();
    if essence == "application/json" || essence.ends_with("+json") {
        if !m.utf8_or_no_charset() {
            return (all, None);
        }
        let media = tagged(&|n, _| n == "charset");
        let canonical = canonical_json(body, opts.ignore_json_pointers).map(|c| (b'J', c));
        return (media, canonical);
    }
    match essence {
        "application/x-www-form-urlencoded" if m.utf8_or_no_charset() => {
            (all, Some((b'F', folded_sorted_pairs(body))))
        }
        "multipart/form-data" => match form_data(&m, body) {
            Some(canonical) => (tagged(&|n, _| n == "boundary"), Some((b'M', canonical))),
            None => (all, None),
        },
        _ => (all, None),
    }
}

fn form_data(m: &Params, body: &[u8]) -> Option<Vec<u8>> {
    canonical_form_data(body, m.get("boundary")?)
}
