//! The fingerprint of an acquire: the caller's opaque string, or the request fingerprinted
//! with the gateway's algorithm ([`idemgate_core::fingerprint`]).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use idemgate_client::wire::{AcquireRequest, RequestParts};
use idemgate_core::fingerprint::{FingerprintInput, FingerprintOptions, CURRENT_VERSION};
use idemgate_core::Fingerprint;
use sha2::{Digest, Sha256};

use crate::problem::ApiError;
use crate::validate;

/// Longest `request.path` and `request.query`, in bytes.
const MAX_TARGET_BYTES: usize = 8192;

/// What an acquire is fingerprinted from.
#[derive(Debug)]
pub(crate) enum RequestFingerprint<'a> {
    /// SHA-256 of the caller's string (domain-separated from request fingerprints); the
    /// same digest under every algorithm version.
    Opaque([u8; 32]),
    /// A request of `scope`, fingerprinted by version, with its body decoded.
    Request {
        scope: &'a str,
        parts: &'a RequestParts,
        body: Vec<u8>,
    },
}

impl<'a> RequestFingerprint<'a> {
    /// Reads `fingerprint` or `request` (exactly one).
    pub(crate) fn from_request(req: &'a AcquireRequest) -> Result<Self, ApiError> {
        match (&req.fingerprint, &req.request) {
            (Some(_), Some(_)) => Err(ApiError::invalid(
                "request",
                "give `fingerprint` or `request`, not both",
            )),
            (None, None) => Err(ApiError::invalid(
                "fingerprint",
                "missing: give `fingerprint` (your own) or `request` (fingerprinted here)",
            )),
            (Some(f), None) => {
                validate::text("fingerprint", f, 128)?;
                let mut h = Sha256::new();
                h.update(b"idemgate-opaque-fingerprint\0");
                h.update(f.as_bytes());
                Ok(Self::Opaque(h.finalize().into()))
            }
            (None, Some(r)) => {
                http::Method::from_bytes(r.method.as_bytes())
                    .map_err(|_| ApiError::invalid("request.method", "not an HTTP method"))?;
                validate::text("request.method", &r.method, 32)?;
                if !r.path.starts_with('/') {
                    return Err(ApiError::invalid("request.path", "must start with `/`"));
                }
                validate::text("request.path", &r.path, MAX_TARGET_BYTES)?;
                if let Some(q) = &r.query {
                    if q.len() > MAX_TARGET_BYTES {
                        return Err(ApiError::invalid(
                            "request.query",
                            format!("must be at most {MAX_TARGET_BYTES} bytes"),
                        ));
                    }
                }
                if let Some(ct) = &r.content_type {
                    validate::text("request.content_type", ct, 1024)?;
                }
                let body = match &r.body_base64 {
                    Some(b) => B64.decode(b).map_err(|e| {
                        ApiError::invalid("request.body_base64", format!("not base64: {e}"))
                    })?,
                    None => Vec::new(),
                };
                Ok(Self::Request {
                    scope: &req.scope,
                    parts: r,
                    body,
                })
            }
        }
    }

    /// The current-version fingerprint.
    pub(crate) fn current(&self) -> Result<Fingerprint, ApiError> {
        self.compute(CURRENT_VERSION)
            .map_err(|e| ApiError::invalid("request.body_base64", e))
    }

    /// The fingerprint under `version`, for a record written by another release (`None`
    /// when this build does not know it: the request then counts as a mismatch).
    pub(crate) fn version(&self, version: u16) -> Option<Fingerprint> {
        self.compute(version).ok()
    }

    fn compute(&self, version: u16) -> Result<Fingerprint, String> {
        match self {
            Self::Opaque(digest) => Ok(Fingerprint {
                version,
                digest: *digest,
            }),
            Self::Request { scope, parts, body } => {
                let input = FingerprintInput {
                    method: &parts.method,
                    route: scope,
                    path: &parts.path,
                    query: parts.query.as_deref(),
                    content_type: parts.content_type.as_deref(),
                    content_encoding: None,
                    headers: &[],
                    body,
                };
                Fingerprint::compute_version(version, &input, &FingerprintOptions::default())
                    .map_err(|e| e.to_string())
            }
        }
    }
}
