//! Admission of a covered request: its principal, its body and its fingerprint.

use http::header::{AUTHORIZATION, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE};
use http::HeaderMap;
use idemgate_core::fingerprint::{
    Fingerprint, FingerprintError, FingerprintInput, FingerprintOptions,
};
use sha2::{Digest, Sha256};

use crate::policy::{PrincipalSource, RoutePolicy};

/// The caller a record belongs to, from the route's principal source (`None`: no caller).
pub(crate) fn principal_of(headers: &HeaderMap, source: &PrincipalSource) -> Option<String> {
    match source {
        PrincipalSource::AuthorizationHash => {
            let mut values = headers
                .get_all(AUTHORIZATION)
                .iter()
                .filter(|v| !v.as_bytes().trim_ascii().is_empty())
                .peekable();
            values.peek()?;
            let mut h = Sha256::new();
            for v in values {
                h.update(v.as_bytes());
                h.update(b"\n");
            }
            Some(format!("auth:{}", hex::encode(&h.finalize()[..16])))
        }
        PrincipalSource::Header(name) => headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(|v| format!("hdr:{v}")),
    }
}

/// The request's fingerprint by algorithm `version`.
///
/// Version 1 decodes up to 8 × `max_body_bytes`, as the releases that wrote it did, so its
/// digest is unchanged; version 2 up to the route's decoded-body limit. From version 2 on,
/// a `Content-Type` or `Content-Encoding` sent more than once or not in visible ASCII is
/// also hashed as received, header by header: upstreams read such requests in more than
/// one way.
///
/// # Errors
/// [`FingerprintError::DecodedTooLarge`] past the decoded-body limit (version 2), and
/// [`FingerprintError::UnknownVersion`].
pub(crate) fn fingerprint_of(
    req: (&http::Method, &http::Uri, &HeaderMap),
    route: &str,
    rp: &RoutePolicy,
    body: &[u8],
    version: u16,
) -> Result<Fingerprint, FingerprintError> {
    let (method, uri, headers) = req;
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let mut extra: Vec<(&str, &[u8])> = rp
        .fingerprint_headers
        .iter()
        .flat_map(|n| {
            headers
                .get_all(n)
                .iter()
                .map(move |v| (n.as_str(), v.as_bytes()))
        })
        .collect();
    if version >= 2 {
        for name in ["content-type", "content-encoding"] {
            let values = headers.get_all(name);
            let odd = values.iter().count() > 1 || values.iter().any(|v| v.to_str().is_err());
            if odd {
                extra.extend(values.iter().map(|v| (name, v.as_bytes())));
            }
        }
    }
    let input = FingerprintInput {
        method: method.as_str(),
        route,
        path: uri.path(),
        query: uri.query(),
        content_type: header(CONTENT_TYPE),
        content_encoding: header(CONTENT_ENCODING),
        headers: &extra,
        body,
    };
    let opts = FingerprintOptions {
        ignore_json_pointers: &rp.ignore_json_pointers,
        max_decoded_bytes: match version {
            1 => rp.max_body_bytes.saturating_mul(8),
            _ => rp.decoded_body_limit(),
        },
    };
    Fingerprint::compute_version(version, &input, &opts)
}

/// The `Content-Length` header as a number, if present and valid.
pub(crate) fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}
