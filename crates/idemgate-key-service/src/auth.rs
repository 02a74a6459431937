//! Callers: bearer tokens per calling service, each bound to a namespace. Tokens are kept
//! only as SHA-256 digests and never logged; records are scoped by namespace, so one
//! namespace can never read, complete or release another's.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use http::request::Parts;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::problem::ApiError;

/// One `[[key_service.clients]]` entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClientConfig {
    /// For logs and metrics (1–64 of `A-Z a-z 0-9 _ . -`), unique.
    pub name: String,
    /// The namespace its records live in (1–64 of `a-z 0-9 _ . -`, starting with a letter
    /// or digit). Clients may share one.
    pub namespace: String,
    /// Hex SHA-256 of the bearer token (64 hex digits). Give it or `token_file`.
    pub token_sha256: String,
    /// A file holding the bearer token itself (a trailing newline is ignored).
    pub token_file: String,
    /// May read records of any namespace (`GET /v1/records?namespace=...`) and purge.
    pub admin: bool,
}

/// An authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The client's name.
    pub name: Arc<str>,
    /// Its namespace.
    pub namespace: Arc<str>,
    /// Whether it is an admin client.
    pub admin: bool,
}

/// The clients, by the SHA-256 of their token.
#[derive(Clone, Debug, Default)]
pub struct Clients {
    by_digest: HashMap<[u8; 32], Caller>,
}

impl Clients {
    /// Builds the table, pushing every problem as `key_service.clients[i].field: why`.
    pub fn from_config(clients: &[ClientConfig], errs: &mut Vec<String>) -> Self {
        let mut by_digest = HashMap::new();
        let mut names = HashMap::new();
        for (i, c) in clients.iter().enumerate() {
            let at = format!("key_service.clients[{i}]");
            if !valid_name(&c.name, false) {
                errs.push(format!(
                    "{at}.name: `{}` must be 1-64 of A-Z a-z 0-9 _ . -",
                    c.name
                ));
            } else if let Some(first) = names.insert(c.name.clone(), i) {
                errs.push(format!(
                    "{at}.name: `{}` is also clients[{first}].name",
                    c.name
                ));
            }
            if !valid_name(&c.namespace, true) {
                errs.push(format!(
                    "{at}.namespace: `{}` must be 1-64 of a-z 0-9 _ . -, starting with a letter or digit",
                    c.namespace
                ));
            }
            let digest = match token_digest(c) {
                Ok(digest) => digest,
                Err(why) => {
                    errs.push(format!("{at}.{why}"));
                    continue;
                }
            };
            let caller = Caller {
                name: c.name.as_str().into(),
                namespace: c.namespace.as_str().into(),
                admin: c.admin,
            };
            if by_digest.insert(digest, caller).is_some() {
                errs.push(format!(
                    "{at}: its token is also another client's; give each client its own"
                ));
            }
        }
        Self { by_digest }
    }

    /// The caller with this bearer token.
    pub fn find(&self, token: &str) -> Option<&Caller> {
        self.by_digest.get(&sha256(token.as_bytes()))
    }

    /// True when no client is configured (every call gets `401`).
    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }

    /// The clients' names (unique), in no particular order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_digest.values().map(|c| &*c.name)
    }
}

fn sha256(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

/// True for a namespace name: 1–64 of `a-z 0-9 _ . -`, starting with a letter or digit.
pub fn valid_namespace(s: &str) -> bool {
    valid_name(s, true)
}

fn valid_name(s: &str, namespace: bool) -> bool {
    let ok = |b: u8| {
        b.is_ascii_digit()
            || b"_.-".contains(&b)
            || (b.is_ascii_lowercase())
            || (!namespace && b.is_ascii_uppercase())
    };
    (1..=64).contains(&s.len())
        && s.bytes().all(ok)
        && (!namespace || s.as_bytes()[0].is_ascii_alphanumeric())
}

/// The digest of `c`'s token, or what is wrong, as `field: why`.
fn token_digest(c: &ClientConfig) -> Result<[u8; 32], String> {
    match (c.token_sha256.trim(), c.token_file.trim()) {
        ("", "") => Err("token_sha256: missing (or give token_file)".into()),
        (h, f) if !h.is_empty() && !f.is_empty() => {
            Err("token_file: give token_sha256 or token_file, not both".into())
        }
        (h, "") => {
            let mut digest = [0u8; 32];
            hex::decode_to_slice(h, &mut digest).map_err(|_| {
                "token_sha256: must be 64 hex digits (sha256sum of the token)".to_owned()
            })?;
            Ok(digest)
        }
        (_, f) => {
            let text = std::fs::read_to_string(Path::new(f))
                .map_err(|e| format!("token_file: cannot read {f}: {e}"))?;
            let token = text.trim_end_matches(['\n', '\r']);
            if token.is_empty() || token.chars().any(|c| c.is_whitespace()) {
                return Err(format!(
                    "token_file: {f} must hold one token without spaces"
                ));
            }
            Ok(sha256(token.as_bytes()))
        }
    }
}

/// The table of clients an app state holds.
pub trait HasClients {
    /// The clients.
    fn clients(&self) -> &Clients;
}

impl<S: HasClients + Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let mut values = parts.headers.get_all(http::header::AUTHORIZATION).iter();
        let token = match (values.next(), values.next()) {
            (Some(value), None) => value.to_str().ok().and_then(bearer_token).map(str::trim),
            _ => None,
        };
        match token.and_then(|t| state.clients().find(t)) {
            Some(caller) => Ok(caller.clone()),
            None => {
                metrics::counter!("idempotency_key_service_unauthorized_total").increment(1);
                Err(ApiError::unauthorized())
            }
        }
    }
}

/// The token of `Bearer <token>`; the scheme is case-insensitive (RFC 9110 §11.1, RFC 6750
/// §2.1).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token)
}

#[cfg(test)]
mod tests {
    use super::{bearer_token, ClientConfig, Clients};

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for v in ["Bearer t0k", "bearer t0k", "BEARER t0k", "BeArEr t0k"] {
            assert_eq!(bearer_token(v), Some("t0k"), "{v}");
        }
        for v in ["Basic t0k", "Bearert0k", "t0k", "Bearer"] {
            assert_eq!(bearer_token(v), None, "{v}");
        }
    }

    fn client(name: &str, ns: &str, hash: &str) -> ClientConfig {
        ClientConfig {
            name: name.into(),
            namespace: ns.into(),
            token_sha256: hash.into(),
            ..Default::default()
        }
    }

    #[test]
    fn tokens_are_found_by_digest_and_bad_entries_name_their_field() {
        // sha256("secret")
        let h = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b";
        let mut errs = Vec::new();
        let clients = Clients::from_config(&[client("payments", "payments", h)], &mut errs);
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(&*clients.find("secret").unwrap().namespace, "payments");
        assert!(clients.find("secret2").is_none());

        let mut errs = Vec::new();
        Clients::from_config(
            &[
                client("a", "Bad NS", h),
                client("a", "ok", "zz"),
                client("b", "ok", h),
                ClientConfig {
                    name: "c".into(),
                    namespace: "ok".into(),
                    ..Default::default()
                },
            ],
            &mut errs,
        );
        let all = errs.join("\n");
        for want in [
            "clients[0].namespace",
            "clients[1].name",
            "clients[1].token_sha256: must be 64 hex",
            "clients[3].token_sha256: missing",
        ] {
            assert!(all.contains(want), "{want} in {all}");
        }
    }
}
