//! Request fingerprints: what makes two requests "the same request".
//!
//! A [`Fingerprint`] is SHA-256 over the method, the route template, the concrete path, the
//! query with its parameters sorted by name, configured request headers, the media type of
//! `Content-Type` and the body in a canonical form. Two requests an upstream could read
//! differently must never share a fingerprint (that would replay one's answer to the
//! other); two retries of one request should. When in doubt the body is hashed as
//! received: a false `422` is a nuisance, a wrong replay is the worst bug.
//!
//! Version 2 ([`CURRENT_VERSION`]):
//! - A `Content-Encoding: gzip` (or `x-gzip`) body is decoded in full, every member
//!   (RFC 1952 §2.2), as common decoders read it. A body that does not decode to its end
//!   (trailing bytes that are not a gzip member, a truncated stream) is hashed as received,
//!   with its encoding. Decoding stops at [`FingerprintOptions::max_decoded_bytes`]:
//!   past it, [`FingerprintError::DecodedTooLarge`].
//! - The media type is lower-cased and its parameters sorted by name (RFC 9110 §8.3.1):
//!   `boundary` and `charset` change how a body reads, so they count. A `Content-Type` that
//!   does not parse strictly counts as received.
//! - `application/json` and `*+json` without a charset or with `charset=utf-8` (the same
//!   reading, RFC 8259 §8.1): canonical JSON (RFC 8785 member order and strings, numbers as
//!   written, configured JSON Pointers removed; see [`crate::canonical`]); duplicate names or
//!   invalid JSON: raw bytes.
//! - `application/x-www-form-urlencoded` without a charset or in UTF-8: pairs stably sorted
//!   by name.
//! - `multipart/form-data`: its parts in order, each part's headers (disposition with name
//!   and filename, content type, any other header; normalised) and content; boundary,
//!   preamble and epilogue left out, so a new boundary per retry is the same request. A form
//!   that does not parse strictly is hashed as received, with its boundary.
//! - Anything else: raw bytes.
//!
//! Version 1, written by earlier releases, is still computed for records that carry it
//! ([`Fingerprint::compute_version`]): it read only the first gzip member and dropped the
//! media type's parameters. Every field is length-prefixed, so no two different inputs
//! concatenate to the same bytes.
//!
//! ```
//! use idemgate_core::fingerprint::{Fingerprint, FingerprintInput, FingerprintOptions};
//!
//! let fp = |content_type: &str, body: &[u8]| {
//!     let input = FingerprintInput {
//!         method: "POST",
//!         route: "POST /payments",
//!         path: "/payments",
//!         query: None,
//!         content_type: Some(content_type),
//!         content_encoding: None,
//!         headers: &[],
//!         body,
//!     };
//!     Fingerprint::compute(&input, &FingerprintOptions::default()).unwrap()
//! };
//! let json = "application/json";
//! assert_eq!(
//!     fp(json, br#"{"amount":10,"currency":"EUR"}"#),
//!     fp(json, br#"{ "currency":"EUR", "amount":10 }"#),
//! );
//! let form = |boundary: &str| {
//!     let ct = format!("multipart/form-data; boundary={boundary}");
//!     let body = format!(
//!         "--{boundary}\r\nContent-Disposition: form-data; name=\"amount\"\r\n\r\n10\r\n--{boundary}--\r\n"
//!     );
//!     fp(&ct, body.as_bytes())
//! };
//! assert_eq!(form("a1b2"), form("------x9"));
//! assert_ne!(fp("text/plain", b"10"), fp("text/plain; charset=utf-16", b"10"));
//! ```

use std::fmt;
use std::io::Read;

use sha2::{Digest, Sha256};

mod media;
mod multipart;
mod pairs;
mod v1;
mod v2;

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod vectors;

/// The fingerprint algorithm this build computes. Stored with every record, so an upgrade
/// that changes the algorithm can still recognise retries of requests fingerprinted before.
pub const CURRENT_VERSION: u16 = 2;

/// A request fingerprint: algorithm version and SHA-256 digest (32 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint {
    /// Algorithm version ([`CURRENT_VERSION`] for new fingerprints).
    pub version: u16,
    /// SHA-256 digest.
    pub digest: [u8; 32],
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}:{}", self.version, hex::encode(&self.digest[..8]))
    }
}

/// The parts of a request that a fingerprint covers.
#[derive(Debug, Clone, Copy)]
pub struct FingerprintInput<'a> {
    /// HTTP method, e.g. `POST`.
    pub method: &'a str,
    /// Matched route template, e.g. `POST /accounts/{id}/refunds`.
    pub route: &'a str,
    /// Concrete path, e.g. `/accounts/42/refunds`.
    pub path: &'a str,
    /// Raw query string without `?`, if any.
    pub query: Option<&'a str>,
    /// `Content-Type` header value, if any.
    pub content_type: Option<&'a str>,
    /// `Content-Encoding` header value, if any.
    pub content_encoding: Option<&'a str>,
    /// Configured request headers to include, as (lower-case name, value).
    pub headers: &'a [(&'a str, &'a [u8])],
    /// Request body as received.
    pub body: &'a [u8],
}

/// How bodies are canonicalized.
#[derive(Debug, Clone, Copy)]
pub struct FingerprintOptions<'a> {
    /// RFC 6901 JSON Pointers removed from JSON bodies before hashing (client timestamps,
    /// trace ids). Defaults to none.
    pub ignore_json_pointers: &'a [String],
    /// Largest decoded size of a gzip body, in bytes. Version 2 stops decoding there and
    /// answers [`FingerprintError::DecodedTooLarge`]; version 1 hashed a larger body as
    /// received (its releases passed 8 × the route's `max_body_bytes`). Defaults to 8 MiB.
    pub max_decoded_bytes: usize,
}

impl Default for FingerprintOptions<'_> {
    fn default() -> Self {
        Self {
            ignore_json_pointers: &[],
            max_decoded_bytes: 8 << 20,
        }
    }
}

/// Why a fingerprint could not be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FingerprintError {
    /// The body decodes (`Content-Encoding`) to more than `limit` bytes; decoding stopped
    /// there. Version 2 only: version 1 hashed such a body as received.
    #[error("the request body decodes to more than {limit} bytes")]
    DecodedTooLarge {
        /// [`FingerprintOptions::max_decoded_bytes`], in bytes.
        limit: usize,
    },
    /// This build does not know the algorithm version.
    #[error("fingerprint version {0} is unknown to this build")]
    UnknownVersion(u16),
}

impl Fingerprint {
    /// Computes the current-version ([`CURRENT_VERSION`]) fingerprint of a request.
    ///
    /// # Errors
    /// [`FingerprintError::DecodedTooLarge`] when an encoded body decodes to more than
    /// [`FingerprintOptions::max_decoded_bytes`].
    pub fn compute(
        input: &FingerprintInput<'_>,
        opts: &FingerprintOptions<'_>,
    ) -> Result<Self, FingerprintError> {
        Self::compute_version(CURRENT_VERSION, input, opts)
    }

    /// Computes the fingerprint of a request with the algorithm `version`, for comparison
    /// with a record written by another release.
    ///
    /// # Errors
    /// [`FingerprintError::UnknownVersion`] for a version this build does not know (the
    /// request then counts as a mismatch, never a replay), and
    /// [`FingerprintError::DecodedTooLarge`] as in [`Fingerprint::compute`] (version 2).
    pub fn compute_version(
        version: u16,
        input: &FingerprintInput<'_>,
        opts: &FingerprintOptions<'_>,
    ) -> Result<Self, FingerprintError> {
        let digest = match version {
            1 => v1::digest(input, opts),
            2 => v2::digest(input, opts)?,
            v => return Err(FingerprintError::UnknownVersion(v)),
        };
        Ok(Self { version, digest })
    }
}

fn field(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_be_bytes());
    h.update(bytes);
}

/// The hash so far of a version's `tag`, then method, route, path, query (in the canonical
/// form of `pairs`, which depends on the version) and configured headers.
fn request_line(tag: &[u8], input: &FingerprintInput<'_>, pairs: fn(&[u8]) -> Vec<u8>) -> Sha256 {
    let mut h = Sha256::new();
    field(&mut h, tag);
    field(&mut h, input.method.as_bytes());
    field(&mut h, input.route.as_bytes());
    field(&mut h, input.path.as_bytes());
    match input.query {
        Some(q) => field(&mut h, &pairs(q.as_bytes())),
        None => field(&mut h, b"\0no-query"),
    }
    let mut headers: Vec<_> = input.headers.to_vec();
    headers.sort();
    field(&mut h, &(headers.len() as u64).to_be_bytes());
    for (name, value) in headers {
        field(&mut h, name.as_bytes());
        field(&mut h, value);
    }
    h
}

/// A version's reading of the body: the media field, and the canonical body (kind, bytes)
/// or `None` for the bytes as received.
type Form = (Vec<u8>, Option<(u8, Vec<u8>)>);

/// The digest: `h`, then the content coding (`identity` once the body was `decoded`, else
/// `Content-Encoding` as received: an encoding left undecoded is part of what the upstream
/// reads), the media field and the canonical body that `form` gives, or `R` and the body.
fn body_fields(
    mut h: Sha256,
    input: &FingerprintInput<'_>,
    decoded: Option<&[u8]>,
    form: impl FnOnce(&[u8]) -> Form,
) -> [u8; 32] {
    let body = decoded.unwrap_or(input.body);
    let encoding = match (decoded, input.content_encoding) {
        (None, Some(e)) => e.trim().as_bytes(),
        _ => b"identity",
    };
    field(&mut h, encoding);
    let (media, canonical) = form(body);
    field(&mut h, &media);
    let (kind, bytes) = canonical
        .as_ref()
        .map_or((b'R', body), |(kind, c)| (*kind, c.as_slice()));
    field(&mut h, &[kind]);
    field(&mut h, bytes);
    h.finalize().into()
}

/// A `gzip`/`x-gzip` body (`None` for any other coding) read through `decoder`, at most
/// `max + 1` decoded bytes: what was read, and whether the read reached the end cleanly.
fn gunzip<'a, R: Read>(
    input: &FingerprintInput<'a>,
    max: usize,
    decoder: fn(&'a [u8]) -> R,
) -> Option<(Vec<u8>, bool)> {
    let encoding = input.content_encoding?.trim();
    if !encoding.eq_ignore_ascii_case("gzip") && !encoding.eq_ignore_ascii_case("x-gzip") {
        return None;
    }
    let mut out = Vec::new();
    let ok = decoder(input.body)
        .take(max as u64 + 1)
        .read_to_end(&mut out)
        .is_ok();
    Some((out, ok))
}

/// `a=1&c=3&b=2` → `a=1&b=2&c=3`: a stable sort by name, so repeated names keep their order
/// (frameworks read `a=1&a=2` as a list).
fn sorted_pairs(raw: &[u8]) -> Vec<u8> {
    let mut pairs: Vec<&[u8]> = raw
        .split(|&b| b == b'&')
        .filter(|p| !p.is_empty())
        .collect();
    pairs.sort_by(|a, b| {
        let name = |p: &[u8]| p.split(|&b| b == b'=').next().unwrap_or(p).to_vec();
        name(a).cmp(&name(b))
    });
    pairs.join(&b'&')
}
