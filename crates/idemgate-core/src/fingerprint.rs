//! Request fingerprints: what makes two requests "the same request".
//!
//! A [`Fingerprint`] is SHA-256 over the method, the route template, the concrete path, the
//! query with its parameters sorted by name, configured request headers, the media type of
//! `Content-Type`, and the body in canonical form: canonical JSON for `application/json` and
//! `*+json` (RFC 8785 order and strings, numbers as written, after removing configured JSON
//! Pointers; see [`crate::canonical`]), name-sorted pairs for
//! `application/x-www-form-urlencoded`, raw bytes otherwise or when the JSON has duplicate
//! names or is not valid. A `Content-Encoding: gzip` body is fingerprinted decoded. Every
//! field is length-prefixed, so no two different inputs concatenate to the same bytes.
//!
//! ```
//! use idemgate_core::fingerprint::{Fingerprint, FingerprintInput, FingerprintOptions};
//!
//! let input = |body: &'static [u8]| FingerprintInput {
//!     method: "POST",
//!     route: "POST /payments",
//!     path: "/payments",
//!     query: None,
//!     content_type: Some("application/json"),
//!     content_encoding: None,
//!     headers: &[],
//!     body,
//! };
//! let opts = FingerprintOptions::default();
//! let a = Fingerprint::compute(&input(br#"{"amount":10,"currency":"EUR"}"#), &opts);
//! let b = Fingerprint::compute(&input(br#"{ "currency":"EUR", "amount":10 }"#), &opts);
//! assert_eq!(a, b);
//! ```

use std::fmt;
use std::io::Read;

use sha2::{Digest, Sha256};

use crate::canonical::canonical_json;

/// The fingerprint algorithm this build computes. Stored with every record, so an upgrade
/// that changes the algorithm can still recognise retries of requests fingerprinted before.
pub const CURRENT_VERSION: u16 = 1;

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
    /// Largest decoded size of a gzip body, in bytes; a larger or undecodable body is hashed
    /// as received. Defaults to 8 MiB.
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

impl Fingerprint {
    /// Computes the current-version fingerprint of a request.
    pub fn compute(input: &FingerprintInput<'_>, opts: &FingerprintOptions<'_>) -> Self {
        let mut h = Sha256::new();
        field(&mut h, b"idemgate-fingerprint-v1");
        field(&mut h, input.method.as_bytes());
        field(&mut h, input.route.as_bytes());
        field(&mut h, input.path.as_bytes());
        match input.query {
            Some(q) => field(&mut h, &sorted_pairs(q.as_bytes())),
            None => field(&mut h, b"\0no-query"),
        }
        let mut headers: Vec<_> = input.headers.to_vec();
        headers.sort();
        field(&mut h, &(headers.len() as u64).to_be_bytes());
        for (name, value) in headers {
            field(&mut h, name.as_bytes());
            field(&mut h, value);
        }
        let decoded = decode_body(input, opts.max_decoded_bytes);
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
        // The media type is part of what the upstream reads, whatever the body's form.
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
        Self {
            version: CURRENT_VERSION,
            digest: h.finalize().into(),
        }
    }

    /// Computes the fingerprint of a request with the algorithm `version`, for comparison
    /// with a record written by another release. `None` if this build does not know it.
    pub fn compute_version(
        version: u16,
        input: &FingerprintInput<'_>,
        opts: &FingerprintOptions<'_>,
    ) -> Option<Self> {
        (version == CURRENT_VERSION).then(|| Self::compute(input, opts))
    }
}

fn field(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_be_bytes());
    h.update(bytes);
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

fn decode_body(input: &FingerprintInput<'_>, max: usize) -> Option<Vec<u8>> {
    let encoding = input.content_encoding?.trim();
    if !encoding.eq_ignore_ascii_case("gzip") && !encoding.eq_ignore_ascii_case("x-gzip") {
        return None;
    }
    let mut out = Vec::new();
    let mut reader = flate2::read::GzDecoder::new(input.body).take(max as u64 + 1);
    reader.read_to_end(&mut out).ok()?;
    (out.len() <= max).then_some(out)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn input<'a>(ct: Option<&'a str>, body: &'a [u8]) -> FingerprintInput<'a> {
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

    fn fp(i: &FingerprintInput<'_>) -> Fingerprint {
        Fingerprint::compute(i, &FingerprintOptions::default())
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
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(br#"{"b":1,"a":2}"#).unwrap();
        let gz = enc.finish().unwrap();
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
}
