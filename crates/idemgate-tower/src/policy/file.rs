//! The gateway's file format for route policies (`[defaults]` and `[[routes]]`), so a Rust
//! service loads the same file as the gateway: each table is an overlay on
//! [`RoutePolicy::default`] (a route's on the defaults'), read with one deserialize.
//!
//! ```
//! use std::time::Duration;
//! use idemgate_tower::Policy;
//!
//! let policy = Policy::from_toml(
//!     "[defaults]\nlease_ttl = \"2s\"\n[[routes]]\nroute = \"POST /refunds\"\nkey_required = true\n",
//! )
//! .unwrap();
//! let (route, refunds) = policy.routes().next().unwrap();
//! assert_eq!((route, refunds.key_required), ("POST /refunds", true));
//! assert_eq!(refunds.lease_ttl, Duration::from_secs(2));
//! assert_eq!(refunds.record_ttl, Duration::from_secs(24 * 3600)); // the default
//! ```

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use serde::Deserialize;

use super::{Policy, RoutePolicy};
use crate::limits::{KeyRate, PrincipalLimits};
use crate::principal::{PrincipalHashKey, PrincipalSource};

/// One `[[routes]]` entry or the `[defaults]` table: [`RoutePolicy`]'s keys, and the ones
/// [`Policy::with_route_tables`] resolves after the deserialize.
#[derive(Debug, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RouteEntry {
    /// The route template, e.g. `POST /accounts/{id}/refunds` (only in `[[routes]]`).
    #[serde(default)]
    pub route: Option<String>,
    /// `"authorization"` (SHA-256 of the header, the default), `"header:NAME"` or
    /// `"jwt:CLAIM"` (a claim of the verified bearer token).
    #[serde(default)]
    pub principal: Option<String>,
    /// Keyed requests of one principal on the route in flight at once (until its forwarded
    /// call and outcome write end, even if the client left); over it `429`
    /// (`principal-limited`). 0 (the default): off.
    #[serde(default)]
    pub max_in_flight_per_principal: u32,
    /// New keys per second of one principal on the route (a token bucket; fractions
    /// allowed); over it `429` with `Retry-After`, nothing stored or forwarded; a replay,
    /// `409` or `422` gives its token back. 0 (the default): off.
    #[serde(default)]
    pub new_keys_per_second_per_principal: f64,
    /// The bucket's size: new keys one principal may send at once. 0 (the default): one
    /// second's worth of the rate, at least 1.
    #[serde(default)]
    pub new_keys_burst_per_principal: u32,
    /// Every other key.
    #[serde(flatten)]
    pub policy: RoutePolicy,
}

/// What is wrong with one key of a route table.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum KeyProblem {
    /// No such setting.
    Unknown,
    /// A value of the wrong type (`key_required = "yes"`, `max_body_bytes = -1`).
    Type(String),
    /// A value of the right type that is not accepted (`lease_ttl = "forever"`).
    Value(String),
}

impl RouteEntry {
    /// Each key of `table` tried alone, so that every problem is found at once (a
    /// deserialize stops at the first): the keys with a problem, in order.
    pub fn key_problems(table: &toml::Table) -> Vec<(String, KeyProblem)> {
        let mut problems = Vec::new();
        for (key, value) in table {
            let one = toml::Table::from_iter([(key.clone(), value.clone())]);
            let Err(e) = toml::Value::Table(one).try_into::<RouteEntry>() else {
                continue;
            };
            let msg = e.message().trim().to_owned();
            let problem = if msg.contains(&format!("unknown field `{key}`")) {
                KeyProblem::Unknown
            } else if ["invalid type", "invalid value", "invalid length"]
                .iter()
                .any(|p| msg.starts_with(p))
            {
                KeyProblem::Type(msg)
            } else {
                KeyProblem::Value(msg)
            };
            problems.push((key.clone(), problem));
        }
        problems
    }
}

/// How `principal` spellings that need keys become sources.
#[derive(Clone, Copy)]
#[allow(missing_debug_implementations)]
pub struct Principals<'a> {
    /// The source of `jwt:CLAIM` for a claim, or why there is none (the gateway's `[jwt]`).
    pub jwt: &'a dyn Fn(&str) -> Result<PrincipalSource, String>,
    /// The key of the `Authorization` hash (the gateway's `principal_hash_key_file`).
    pub hash_key: Option<&'a Arc<PrincipalHashKey>>,
}

impl Policy {
    /// `self` with the default route and routes of a file in the gateway's format: its
    /// `[defaults]` and `[[routes]]` tables; other keys are ignored. `jwt:CLAIM` principals
    /// need a verifier, which only the gateway's `[jwt]` provides (set one with
    /// [`Policy::with_principal`] instead).
    ///
    /// # Errors
    /// Every problem at once, each naming its key (`routes[2].lease_ttl: ...`).
    pub fn from_toml(text: &str) -> Result<Self, Vec<String>> {
        /// The part of the file read; other keys are the gateway's.
        #[derive(Deserialize)]
        struct Routes {
            #[serde(default)]
            defaults: toml::Table,
            #[serde(default)]
            routes: Vec<toml::Table>,
        }
        let file: Routes = toml::from_str(text).map_err(|e| vec![e.to_string()])?;
        let mut errs = Vec::new();
        let no_jwt = |_: &str| Err("needs a JWT verifier (the gateway's [jwt])".to_owned());
        let principals = Principals {
            jwt: &no_jwt,
            hash_key: None,
        };
        let policy =
            Self::default().with_route_tables(&file.defaults, &file.routes, principals, &mut errs);
        errs.is_empty().then_some(policy).ok_or(errs)
    }

    /// `self` with `defaults` (an overlay on [`RoutePolicy::default`]) as its default route
    /// and each of `routes` (an overlay on `defaults`) added, every problem pushed to
    /// `errs` naming its key. A route inherits the defaults only when they are valid (a bad
    /// default is reported once, under `defaults`).
    pub fn with_route_tables<'t>(
        mut self,
        defaults: &toml::Table,
        routes: impl IntoIterator<Item = &'t toml::Table>,
        principals: Principals<'_>,
        errs: &mut Vec<String>,
    ) -> Self {
        let before = errs.len();
        let (entry, mut inherited) = read("defaults", defaults, &toml::Table::new(), errs);
        let routed = inherited.remove("route").is_some();
        self = self.with_default_route(resolve("defaults", entry, principals, errs));
        if errs.len() > before {
            inherited.clear();
        }
        if routed {
            errs.push("defaults.route: routes belong in [[routes]]".into());
        }
        let mut seen = HashMap::new();
        for (i, table) in routes.into_iter().enumerate() {
            let field = format!("routes[{i}]");
            let (mut entry, _) = read(&field, table, &inherited, errs);
            let template = entry.route.take();
            let policy = resolve(&field, entry, principals, errs);
            let Some(template) = template else {
                errs.push(format!("{field}.route: missing (e.g. \"POST /payments\")"));
                continue;
            };
            let spelled: Vec<&str> = template.split_whitespace().collect();
            if let Some(first) = seen.insert(spelled.join(" "), i) {
                errs.push(format!(
                    "{field}.route: `{template}` is already routes[{first}].route; merge the two entries"
                ));
                continue;
            }
            match self.clone().with_route(&template, policy) {
                Ok(p) => self = p,
                Err(e) => errs.push(format!("{field}.route: {e}")),
            }
        }
        self
    }
}

/// `own` overlaid on `inherited`, without its bad keys (each reported), read as an entry;
/// also the overlay read.
fn read(
    field: &str,
    own: &toml::Table,
    inherited: &toml::Table,
    errs: &mut Vec<String>,
) -> (RouteEntry, toml::Table) {
    let mut merged = inherited.clone();
    let mut own = own.clone();
    for (key, problem) in RouteEntry::key_problems(&own) {
        errs.push(match problem {
            KeyProblem::Unknown => format!("{field}.{key}: unknown key"),
            KeyProblem::Type(m) | KeyProblem::Value(m) => format!("{field}.{key}: {m}"),
        });
        own.remove(&key);
    }
    merged.extend(own);
    let entry = toml::Value::Table(merged.clone())
        .try_into()
        .unwrap_or_else(|e: toml::de::Error| {
            errs.push(format!("{field}: {}", e.message().trim()));
            RouteEntry::default()
        });
    (entry, merged)
}

/// The route policy of a read entry: the checks across its keys, its principal and limits.
fn resolve(
    field: &str,
    entry: RouteEntry,
    principals: Principals<'_>,
    errs: &mut Vec<String>,
) -> RoutePolicy {
    let mut policy = entry.policy.clone();
    let (record_ttl, lease_ttl) = (policy.record_ttl, policy.lease_ttl);
    if lease_ttl < Duration::from_millis(30) {
        errs.push(format!("{field}.lease_ttl: must be at least 30ms"));
    }
    // A record never expires under a live lease, so a TTL below the lease would be
    // stretched to the lease anyway: say so instead.
    if record_ttl <= lease_ttl {
        errs.push(format!(
            "{field}.record_ttl: must be longer than lease_ttl ({} <= {})",
            humantime::format_duration(record_ttl),
            humantime::format_duration(lease_ttl)
        ));
    }
    let retry_after = policy.in_flight_retry_after;
    if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&retry_after) {
        errs.push(format!(
            "{field}.in_flight_retry_after: must be from 1s to 1h"
        ));
    }
    let redacts = policy.store_response == super::StoreResponse::Redacted;
    let refused = ["store_response", "redact_json_pointers"]
        .map(|key| format!("{field}.{key}:"))
        .iter()
        .any(|prefix| errs.iter().any(|e| e.starts_with(prefix.as_str())));
    match (redacts, policy.redact_json_pointers.is_empty()) {
        _ if refused => {}
        (true, true) => errs.push(format!(
            "{field}.redact_json_pointers: store_response = \"redacted\" names no value to redact"
        )),
        // A status-only route stores no body: its pointers (from `[defaults]`) are moot.
        (false, false) if policy.store_response == super::StoreResponse::Full => {
            errs.push(format!(
                "{field}.redact_json_pointers: redacts nothing unless store_response = \"redacted\" (it is \"full\"; set redact_json_pointers = [] on a route that stores responses whole)"
            ))
        }
        _ => {}
    }
    for (list, problem) in policy.status_rules().unreachable() {
        errs.push(format!("{field}.{list}: {problem}"));
    }
    policy.principal = principal(field, entry.principal.as_deref(), principals, errs);
    policy.limits = limits(field, &entry, errs);
    policy
}

/// Parses `principal`: `authorization` (keyed by `hash_key` when there is one),
/// `header:NAME` or `jwt:CLAIM`.
fn principal(
    field: &str,
    spelled: Option<&str>,
    principals: Principals<'_>,
    errs: &mut Vec<String>,
) -> PrincipalSource {
    let p = spelled.unwrap_or("authorization");
    let source = if p == "authorization" {
        let keyed = principals
            .hash_key
            .cloned()
            .map(PrincipalSource::AuthorizationHmac);
        Ok(keyed.unwrap_or(PrincipalSource::AuthorizationHash))
    } else if let Some(claim) = p.strip_prefix("jwt:").map(str::trim) {
        if claim.is_empty() || claim.contains(|c: char| c.is_whitespace() || c == ':') {
            errs.push(format!(
                "{field}.principal: `{p}` needs a claim name, e.g. \"jwt:sub\""
            ));
        }
        (principals.jwt)(claim).map_err(|e| format!("{field}.principal: `{p}` {e}"))
    } else {
        p.strip_prefix("header:")
            .and_then(|h| HeaderName::from_bytes(h.trim().as_bytes()).ok())
            .map(PrincipalSource::Header)
            .ok_or_else(|| {
                format!("{field}.principal: `{p}` is not \"authorization\", \"header:NAME\" or \"jwt:CLAIM\"")
            })
    };
    source.unwrap_or_else(|e| {
        errs.push(e);
        PrincipalSource::AuthorizationHash
    })
}

/// The per-principal limits of an entry (0 turns a limit off).
fn limits(field: &str, entry: &RouteEntry, errs: &mut Vec<String>) -> PrincipalLimits {
    let rate = entry.new_keys_per_second_per_principal;
    let burst = entry.new_keys_burst_per_principal;
    let new_keys = if rate == 0.0 {
        if burst != 0 {
            errs.push(format!(
                "{field}.new_keys_burst_per_principal: {burst} has no effect without new_keys_per_second_per_principal (set both to 0 to turn the limit off)"
            ));
        }
        None
    } else if burst > 1_000_000 {
        errs.push(format!(
            "{field}.new_keys_burst_per_principal: {burst} is above 1000000"
        ));
        None
    } else {
        KeyRate::new(rate, burst)
            .map_err(|e| errs.push(format!("{field}.new_keys_per_second_per_principal: {e}")))
            .ok()
    };
    PrincipalLimits {
        max_in_flight: NonZeroU32::new(entry.max_in_flight_per_principal),
        new_keys,
    }
}

#[cfg(test)]
mod tests;
