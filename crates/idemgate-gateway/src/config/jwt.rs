//! The `[jwt]` table: keys and checks for routes whose principal is a JWT claim
//! (`principal = "jwt:sub"`). Files are read once, when the configuration is validated.

use std::sync::Arc;

use idemgate_tower::JwtVerifier;
use serde::{Deserialize, Serialize};

use super::parse::{duration, read};

/// `[jwt]`: how bearer tokens are verified. Paths are relative to the working directory.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct JwtConfig {
    /// File holding the HS256 secret (raw bytes; trailing whitespace is dropped), at least
    /// 32 bytes (RFC 7518 §3.2).
    pub hs256_secret_file: Option<String>,
    /// File holding a JWK set (RFC 7517 §5): RSA, EC P-256/P-384 or Ed25519 public keys,
    /// each with a `kid` when there are several.
    pub jwks_file: Option<String>,
    /// The `iss` every token must carry; unset (the default): any.
    pub issuer: Option<String>,
    /// The `aud` every token must carry (set it, so tokens minted for other APIs are
    /// refused); unset (the default): any.
    pub audience: Option<String>,
    /// Clock skew allowed on `exp` and `nbf`, whole seconds. Default `30s`.
    pub leeway: String,
}

impl Default for JwtConfig {
    fn default() -> Self {
        Self {
            hs256_secret_file: None,
            jwks_file: None,
            issuer: None,
            audience: None,
            leeway: "30s".into(),
        }
    }
}

impl JwtConfig {
    /// Reads the key files and builds the verifier; every problem goes to `errs` as
    /// `jwt.FIELD: ...`.
    pub(super) fn verifier(&self, errs: &mut Vec<String>) -> Option<Arc<JwtVerifier>> {
        let before = errs.len();
        let mut v = JwtVerifier::new();
        if self.hs256_secret_file.is_none() && self.jwks_file.is_none() {
            errs.push("jwt: set hs256_secret_file, jwks_file or both".into());
        }
        if let Some(secret) = read("jwt.hs256_secret_file", &self.hs256_secret_file, errs) {
            let secret = secret.trim_ascii_end();
            // On an error `v` is dropped: nothing is returned then.
            v = v.with_hs256_secret(secret).unwrap_or_else(|e| {
                errs.push(format!("jwt.hs256_secret_file: {e}"));
                JwtVerifier::new()
            });
        }
        if let Some(jwks) = read("jwt.jwks_file", &self.jwks_file, errs) {
            v = v.with_jwks(&jwks).unwrap_or_else(|e| {
                errs.push(format!("jwt.jwks_file: {e}"));
                JwtVerifier::new()
            });
        }
        for (field, value) in [("issuer", &self.issuer), ("audience", &self.audience)] {
            if value.as_deref().is_some_and(|s| s.trim().is_empty()) {
                errs.push(format!("jwt.{field}: empty; leave it out to accept any"));
            }
        }
        if let Some(iss) = &self.issuer {
            v = v.with_issuer(iss.clone());
        }
        if let Some(aud) = &self.audience {
            v = v.with_audience(aud.clone());
        }
        if let Some(leeway) = duration("jwt.leeway", &self.leeway, errs) {
            v = v.with_leeway(leeway);
        }
        (errs.len() == before).then(|| Arc::new(v))
    }
}
