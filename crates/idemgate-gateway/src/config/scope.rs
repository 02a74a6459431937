//! The settings that decide a request's scope (principal, route), projected out of a
//! configuration, so that a reload can tell whether it would move keys in flight into
//! another scope ([`ScopeSettings::changes`]).
//!
//! A record is found by (principal, route, key). A reload that changes how a request's
//! principal or route is derived makes a retry look in another scope than its first
//! attempt, where it finds nothing and runs again: the double execution idemgate exists to
//! prevent. `crate::reload` refuses such a reload unless the file allows it.
//!
//! Settings that only refuse requests are not scope settings: `override_headers` decides
//! which requests get `400 ambiguous-request`, and a refused request stores nothing, so a
//! change of it never sends a retry to a scope other than its first attempt's.
//!
//! Adding a scope-relevant setting: a field in [`ScopeSettings`] (or `RouteScope`, per
//! route), its line in `new` and its `check` line in `changes`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use http::HeaderName;
use idemgate_tower::path::{EncodedSlash, ForwardPath, TrailingSlash, Unmatched};
use idemgate_tower::{Policy, PrincipalHashKey, PrincipalSource, RoutePolicy};

use super::Config;

/// What decides the scope of a request, for one configuration: two configurations with
/// equal `ScopeSettings` give every request the same (principal, route).
///
/// # Examples
/// ```
/// use idemgate_gateway::config::Config;
///
/// let text = "upstream = \"http://127.0.0.1:3000\"\n";
/// let old = Config::from_toml(text).unwrap().validate().unwrap();
/// let more = format!("{text}[[routes]]\nroute = \"POST /payments/{{id}}\"\n");
/// let new = Config::from_toml(&more).unwrap().validate().unwrap();
/// let added = old.base.scope.changes(&new.base.scope);
/// assert_eq!(added, ["routes: `POST /payments/{id}` added"]);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct ScopeSettings {
    /// `header_name` (compared as a header name: case does not count).
    header_name: HeaderName,
    /// The methods covered (`methods` and every route's method), sorted, one space apart.
    methods: String,
    /// The key of `principal_hash_key_file` (its contents, not its path), when a route
    /// scopes by it. Never shown.
    principal_hash_key: Option<Arc<PrincipalHashKey>>,
    /// `[jwt] issuer`, when a route scopes by a JWT claim.
    jwt_issuer: Issuer,
    /// `unmatched`: whether unmatched paths get a scope at all.
    unmatched: Unmatched,
    /// `forward_path`: the path fingerprinted (a retry across a change gets `422`).
    forward_path: ForwardPath,
    /// Requests that match no route (`[defaults]`).
    defaults: RouteScope,
    /// `[[routes]]`, by template (`METHOD /path/{param}`): adding one moves the requests it
    /// matches from their concrete-path scope into the template's; removing one, back.
    routes: BTreeMap<String, RouteScope>,
}

/// The scope-relevant settings of one route (or of `[defaults]`).
#[derive(Clone, Debug, PartialEq)]
struct RouteScope {
    /// `principal`, as `authorization`, `authorization-hmac`, `header:NAME` or `jwt:CLAIM`.
    principal: String,
    /// `trailing_slash`: which paths match, and the unmatched scope.
    trailing_slash: TrailingSlash,
    /// `encoded_slash`: which paths match.
    encoded_slash: EncodedSlash,
    /// `case_insensitive`: which paths match, and the unmatched scope.
    case_insensitive: bool,
}

/// `[jwt] issuer`, or any (`None`).
#[derive(Clone, Debug, PartialEq)]
struct Issuer(Option<String>);

impl fmt::Display for Issuer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_deref().unwrap_or("(any)"))
    }
}

impl ScopeSettings {
    /// The scope settings of `config`, whose validated policy is `policy`.
    pub fn new(config: &Config, policy: &Policy) -> Self {
        let sources = || {
            std::iter::once(&policy.default_route().principal)
                .chain(policy.routes().map(|(_, p)| &p.principal))
        };
        let hmac_key = sources().find_map(|p| match p {
            PrincipalSource::AuthorizationHmac(key) => Some(key.clone()),
            _ => None,
        });
        let jwt = sources().any(|p| matches!(p, PrincipalSource::Jwt { .. }));
        let methods: BTreeSet<&str> = policy.methods.iter().map(|m| m.as_str()).collect();
        let jwt_config = config.jwt.as_ref().filter(|_| jwt);
        let issuer = jwt_config.and_then(|j| j.issuer.clone());
        Self {
            header_name: policy.header_name.clone(),
            methods: methods.into_iter().collect::<Vec<_>>().join(" "),
            principal_hash_key: hmac_key,
            jwt_issuer: Issuer(issuer),
            unmatched: policy.unmatched,
            forward_path: policy.forward_path,
            defaults: RouteScope::new(policy.default_route()),
            routes: policy
                .routes()
                .map(|(template, p)| (template.to_owned(), RouteScope::new(p)))
                .collect(),
        }
    }

    /// What differs between `self` (the configuration applied last) and `new`, one entry
    /// per setting, named as in the file with its old and new values (a key is named, never
    /// shown); empty when every request keeps its scope.
    pub fn changes(&self, new: &Self) -> Vec<String> {
        let mut changed = Vec::new();
        let c = &mut changed;
        check(c, "header_name", &self.header_name, &new.header_name);
        check(c, "methods", &self.methods, &new.methods);
        if self.principal_hash_key != new.principal_hash_key {
            c.push("principal_hash_key_file (its key)".into());
        }
        check(c, "jwt.issuer", &self.jwt_issuer, &new.jwt_issuer);
        check(c, "unmatched", &self.unmatched, &new.unmatched);
        check(c, "forward_path", &self.forward_path, &new.forward_path);
        self.defaults.changes("defaults", &new.defaults, c);
        let templates: BTreeSet<&String> = self.routes.keys().chain(new.routes.keys()).collect();
        for t in templates {
            match (self.routes.get(t), new.routes.get(t)) {
                (Some(old), Some(new)) => old.changes(&format!("routes[`{t}`]"), new, c),
                (Some(_), None) => c.push(format!("routes: `{t}` removed")),
                (None, Some(_)) => c.push(format!("routes: `{t}` added")),
                (None, None) => {}
            }
        }
        changed
    }
}

impl RouteScope {
    fn new(policy: &RoutePolicy) -> Self {
        Self {
            principal: principal_name(&policy.principal),
            trailing_slash: policy.trailing_slash,
            encoded_slash: policy.encoded_slash,
            case_insensitive: policy.case_insensitive,
        }
    }

    /// Pushes to `changed` what differs from `new`, each named under `at`.
    fn changes(&self, at: &str, new: &Self, c: &mut Vec<String>) {
        let (a, b) = (self, new);
        check(c, &format!("{at}.principal"), &a.principal, &b.principal);
        check(
            c,
            &format!("{at}.trailing_slash"),
            &a.trailing_slash,
            &b.trailing_slash,
        );
        check(
            c,
            &format!("{at}.encoded_slash"),
            &a.encoded_slash,
            &b.encoded_slash,
        );
        check(
            c,
            &format!("{at}.case_insensitive"),
            &a.case_insensitive,
            &b.case_insensitive,
        );
    }
}

/// Pushes `what (`old` to `new`)` to `changed` when the two differ.
fn check<T: PartialEq + fmt::Display>(changed: &mut Vec<String>, what: &str, old: &T, new: &T) {
    if old != new {
        changed.push(format!("{what} (`{old}` to `{new}`)"));
    }
}

/// A principal source as the file spells it (an HMAC-keyed `authorization` apart).
fn principal_name(source: &PrincipalSource) -> String {
    match source {
        PrincipalSource::AuthorizationHash => "authorization".into(),
        PrincipalSource::AuthorizationHmac(_) => "authorization-hmac".into(),
        PrincipalSource::Header(name) => format!("header:{name}"),
        PrincipalSource::Jwt { claim, .. } => format!("jwt:{claim}"),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests;
