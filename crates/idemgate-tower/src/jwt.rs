//! [`JwtVerifier`]: a verified JWT claim as the principal (RFC 7519, signatures per RFC 7515).
//!
//! The key material (an HS256 secret and/or a JWK set, RFC 7517) is loaded once, when the
//! verifier is built; verifying a token reads no file. Each token is checked for its
//! signature, `exp` (required), `nbf`, and, when configured, `iss` and `aud`, with a clock
//! leeway. The principal is `jwt:<claim>:<hash>`, where `<hash>` is the first 16 bytes, in
//! hex, of SHA-256 over the token's `iss` (empty if absent; a non-string `iss` is refused)
//! and the claim's value (an integer as its decimal digits), each prefixed by its length in
//! bytes (8 bytes, big-endian): a refreshed token of the same subject keeps the same scope,
//! and no subject identifier is stored in clear.
//!
//! # Examples
//! ```
//! use std::time::Duration;
//! use idemgate_tower::jwt::JwtVerifier;
//!
//! let verifier = JwtVerifier::new()
//!     .with_hs256_secret(b"0123456789abcdef0123456789abcdef")
//!     .unwrap()
//!     .with_issuer("https://auth.example.com")
//!     .with_leeway(Duration::from_secs(30));
//! assert!(verifier.principal("not-a-token", "sub").is_err());
//! ```

use std::collections::HashSet;
use std::time::Duration;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, Validation};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

pub use crate::rejection::TokenError;

/// Shortest HS256 secret accepted, in bytes: a key as long as the hash output
/// (RFC 7518 §3.2).
pub const MIN_HS256_SECRET_BYTES: usize = 32;

/// Why key material was refused when building a [`JwtVerifier`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JwtKeyError {
    /// The HS256 secret is shorter than [`MIN_HS256_SECRET_BYTES`].
    #[error("the secret holds {len_bytes} bytes; HS256 needs at least {MIN_HS256_SECRET_BYTES} (RFC 7518 §3.2)")]
    SecretTooShort {
        /// Its length, in bytes.
        len_bytes: usize,
    },
    /// The text is not a JWK set (`{"keys": [...]}`, RFC 7517 §5).
    #[error("not a JWK set (RFC 7517 §5): {0}")]
    NotJwks(#[source] serde_json::Error),
    /// One key of the set cannot be used.
    #[error("keys[{index}]: {reason}")]
    BadKey {
        /// Its position in `keys`.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// The set holds no signing key.
    #[error("the JWK set holds no signing key")]
    NoSigningKeys,
}

/// One signing key of the JWK set.
struct SetKey {
    kid: Option<String>,
    alg: Algorithm,
    key: DecodingKey,
}

/// Verifies bearer tokens and derives the principal from one of their claims.
///
/// Build it once (at start-up) and share it: see the module docs.
#[derive(Default)]
pub struct JwtVerifier {
    hs256: Option<DecodingKey>,
    keys: Vec<SetKey>,
    issuer: Option<String>,
    audience: Option<String>,
    leeway: Duration,
}

impl std::fmt::Debug for JwtVerifier {
    /// Key ids and algorithms only: never key material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<_> = self
            .keys
            .iter()
            .map(|k| format!("{:?}/{:?}", k.kid, k.alg))
            .collect();
        f.debug_struct("JwtVerifier")
            .field("hs256", &self.hs256.is_some())
            .field("keys", &keys)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("leeway", &self.leeway)
            .finish()
    }
}

/// Verifiers compare by identity: two routes share a verifier or they do not.
impl PartialEq for JwtVerifier {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}
impl Eq for JwtVerifier {}

impl JwtVerifier {
    /// A verifier with no key: every token is refused until keys are added. No issuer or
    /// audience check; no leeway.
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepts HS256 tokens signed with `secret` (raw bytes).
    ///
    /// # Errors
    /// [`JwtKeyError::SecretTooShort`] below [`MIN_HS256_SECRET_BYTES`].
    pub fn with_hs256_secret(mut self, secret: &[u8]) -> Result<Self, JwtKeyError> {
        if secret.len() < MIN_HS256_SECRET_BYTES {
            return Err(JwtKeyError::SecretTooShort {
                len_bytes: secret.len(),
            });
        }
        self.hs256 = Some(DecodingKey::from_secret(secret));
        Ok(self)
    }

    /// Accepts tokens signed by a key of `jwks`, a JWK set in JSON (RFC 7517 §5): RSA
    /// (RS256, or the key's `alg` among RS384/RS512/PS256/PS384/PS512), EC P-256 (ES256) or
    /// P-384 (ES384), and Ed25519 (EdDSA). Keys marked `"use": "enc"` are skipped. With
    /// several keys each needs a distinct `kid`; a token picks its key by `kid`.
    ///
    /// # Errors
    /// [`JwtKeyError`] naming the first unusable key.
    pub fn with_jwks(mut self, jwks: &[u8]) -> Result<Self, JwtKeyError> {
        let set: JwkSet = serde_json::from_slice(jwks).map_err(JwtKeyError::NotJwks)?;
        let mut keys = Vec::new();
        for (index, jwk) in set.keys.iter().enumerate() {
            if jwk.common.public_key_use == Some(PublicKeyUse::Encryption) {
                continue;
            }
            let bad = |reason: String| JwtKeyError::BadKey { index, reason };
            let alg = key_algorithm(&jwk.algorithm, jwk.common.key_algorithm).map_err(bad)?;
            let key = DecodingKey::from_jwk(jwk).map_err(|e| bad(e.to_string()))?;
            let kid = jwk.common.key_id.clone();
            if kid.is_some() && keys.iter().any(|k: &SetKey| k.kid == kid) {
                let twice = format!("`kid` {:?} is used twice", kid.unwrap_or_default());
                return Err(bad(twice));
            }
            keys.push(SetKey { kid, alg, key });
        }
        if keys.is_empty() {
            return Err(JwtKeyError::NoSigningKeys);
        }
        let unnamed = keys.iter().position(|k| k.kid.is_none());
        if let Some(index) = unnamed.filter(|_| keys.len() > 1) {
            let reason = "no `kid`: with several keys each needs one".into();
            return Err(JwtKeyError::BadKey { index, reason });
        }
        self.keys = keys;
        Ok(self)
    }

    /// Requires `iss` to equal `issuer` (RFC 7519 §4.1.1).
    pub fn with_issuer(mut self, issuer: impl Into<String>) -> Self {
        self.issuer = Some(issuer.into());
        self
    }

    /// Requires `aud` to name `audience` (RFC 7519 §4.1.3). Without it, any `aud` passes.
    pub fn with_audience(mut self, audience: impl Into<String>) -> Self {
        self.audience = Some(audience.into());
        self
    }

    /// Clock skew allowed on `exp` and `nbf`, in whole seconds. Defaults to none.
    pub fn with_leeway(mut self, leeway: Duration) -> Self {
        self.leeway = leeway;
        self
    }

    /// Verifies `token` and returns its claims.
    ///
    /// # Errors
    /// [`TokenError`] saying why the token is refused.
    pub fn verify(&self, token: &str) -> Result<Map<String, Value>, TokenError> {
        let header = match jsonwebtoken::decode_header(token) {
            Ok(h) => h,
            Err(_) if header_alg(token).is_some_and(|a| a.eq_ignore_ascii_case("none")) => {
                return Err(TokenError::AlgorithmNotAllowed("none".into()))
            }
            Err(_) => return Err(TokenError::Malformed),
        };
        let (key, alg) = self.key_for(header.alg, header.kid.as_deref())?;
        let mut v = Validation::new(alg);
        v.leeway = self.leeway.as_secs();
        v.validate_nbf = true;
        let mut required = HashSet::from(["exp".to_owned()]);
        if let Some(iss) = &self.issuer {
            v.set_issuer(&[iss]);
            required.insert("iss".into());
        }
        match &self.audience {
            Some(aud) => {
                v.set_audience(&[aud]);
                required.insert("aud".into());
            }
            None => v.validate_aud = false,
        }
        v.required_spec_claims = required;
        jsonwebtoken::decode::<Map<String, Value>>(token, key, &v)
            .map(|data| data.claims)
            .map_err(|e| token_error(e.into_kind()))
    }

    /// Verifies `token` and returns the principal from its `claim`: `jwt:<claim>:<hash>` (see
    /// the module docs).
    ///
    /// # Errors
    /// [`TokenError`]; [`TokenError::MissingClaim`]/[`TokenError::BadClaim`] when `claim` is
    /// absent, empty, or neither a string nor an integer.
    pub fn principal(&self, token: &str, claim: &str) -> Result<String, TokenError> {
        let claims = self.verify(token)?;
        let value = match claims.get(claim) {
            None | Some(Value::Null) => return Err(TokenError::MissingClaim(claim.into())),
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
            Some(_) => return Err(TokenError::BadClaim(claim.into())),
        };
        // An `iss` that is not a string (RFC 7519 §4.1.1 makes it a StringOrURI) would
        // hash as "no issuer" and share that scope.
        let iss = match claims.get("iss") {
            None => "",
            // An empty issuer would share the scope of tokens without one.
            Some(Value::String(s)) if !s.is_empty() => s,
            Some(_) => return Err(TokenError::BadClaim("iss".into())),
        };
        let mut h = Sha256::new();
        // Length-prefixed, so no (issuer, value) pair hashes like another.
        for part in [iss, value.as_str()] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
        Ok(format!("jwt:{claim}:{}", hex::encode(&h.finalize()[..16])))
    }

    /// The key for a token with `alg` and `kid`: HS256 uses the secret; other algorithms a
    /// key of the set, by `kid` (or the only key when the token has none), whose algorithm
    /// must be `alg`.
    fn key_for(
        &self,
        alg: Algorithm,
        kid: Option<&str>,
    ) -> Result<(&DecodingKey, Algorithm), TokenError> {
        let refused = || TokenError::AlgorithmNotAllowed(format!("{alg:?}"));
        if alg.family() == AlgorithmFamily::Hmac {
            return match (&self.hs256, alg) {
                (Some(key), Algorithm::HS256) => Ok((key, alg)),
                _ => Err(refused()),
            };
        }
        if self.keys.is_empty() {
            return Err(refused());
        }
        let key = match kid {
            Some(kid) => self.keys.iter().find(|k| k.kid.as_deref() == Some(kid)),
            None if self.keys.len() == 1 => self.keys.first(),
            None => None,
        }
        .ok_or(TokenError::UnknownKey)?;
        if key.alg != alg {
            return Err(refused());
        }
        Ok((&key.key, key.alg))
    }
}

/// The signing algorithm of a JWK: its `alg` if given (and fitting its type), else the
/// usual one for its type.
fn key_algorithm(
    params: &AlgorithmParameters,
    declared: Option<KeyAlgorithm>,
) -> Result<Algorithm, String> {
    use AlgorithmParameters as P;
    let unsupported = |curve, supported| format!("curve {curve:?} is not supported ({supported})");
    let inferred = match params {
        P::RSA(_) => Algorithm::RS256,
        P::EllipticCurve(p) if p.curve == EllipticCurve::P256 => Algorithm::ES256,
        P::EllipticCurve(p) if p.curve == EllipticCurve::P384 => Algorithm::ES384,
        P::EllipticCurve(p) => return Err(unsupported(&p.curve, "P-256, P-384")),
        P::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => Algorithm::EdDSA,
        P::OctetKeyPair(p) => return Err(unsupported(&p.curve, "Ed25519")),
        P::OctetKey(_) => {
            let why = "symmetric (`oct`) keys are not accepted here";
            return Err(format!("{why}; put an HS256 secret in its own file"));
        }
    };
    let Some(declared) = declared else {
        return Ok(inferred);
    };
    // HMAC algorithms parse too, but a JWK set holds no secrets.
    let alg = declared.to_string().parse::<Algorithm>().ok();
    let Some(alg) = alg.filter(|a| a.family() != AlgorithmFamily::Hmac) else {
        return Err(format!("`alg` {declared} is not a signature algorithm"));
    };
    if alg.family() != inferred.family() || (alg.family() == AlgorithmFamily::Ec && alg != inferred)
    {
        return Err(format!("`alg` {alg:?} does not fit the key's type"));
    }
    Ok(alg)
}

/// The `alg` of a token's header, read without trusting it (to name `none`).
fn header_alg(token: &str) -> Option<String> {
    use base64::Engine as _;
    let part = token.split('.').next()?;
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part.trim_end_matches('='))
        .ok()?;
    let header: Map<String, Value> = serde_json::from_slice(&json).ok()?;
    header.get("alg")?.as_str().map(str::to_owned)
}

fn token_error(kind: ErrorKind) -> TokenError {
    match kind {
        ErrorKind::InvalidSignature => TokenError::BadSignature,
        ErrorKind::ExpiredSignature => TokenError::Expired,
        ErrorKind::ImmatureSignature => TokenError::NotYetValid,
        ErrorKind::InvalidIssuer => TokenError::WrongIssuer,
        ErrorKind::InvalidAudience => TokenError::WrongAudience,
        ErrorKind::MissingRequiredClaim(c) => TokenError::MissingClaim(c),
        ErrorKind::InvalidClaimFormat(c) => TokenError::BadClaim(c),
        ErrorKind::InvalidAlgorithm => TokenError::AlgorithmNotAllowed("?".into()),
        _ => TokenError::Malformed,
    }
}

#[cfg(test)]
mod tests;
