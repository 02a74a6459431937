//! The gateway's configuration: a TOML file, overridden by CLI flags.
//!
//! Unknown keys are rejected with their name; durations are humantime strings (`"24h"`,
//! `"10s"`, `"250ms"`); integer keys carry their unit in the name (`max_body_bytes`).
//! [`Config::validate`] reports every error at once, each naming its field.
//! `docs/gateway.example.toml` lists every key with its default.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use http::HeaderName;
use idemgate_tower::{Policy, RoutePolicy};
use serde::Deserialize;

use crate::store::{OpenOptions, StoreUrl};

/// The whole file. Every field has the DESIGN.md default.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address of the gateway listener. Default `127.0.0.1:8080`.
    pub listen: String,
    /// Address of the admin listener (`/healthz`, `/readyz`, `/metrics`); empty disables it.
    /// Default `127.0.0.1:9090`.
    pub admin_listen: String,
    /// Base URL of the API behind the gateway (`http://host:port[/prefix]` or `https://...`).
    /// Required.
    pub upstream: String,
    /// PEM file of the CA certificates trusted for an `https://` upstream, instead of the
    /// system's roots. Default empty (system roots).
    pub upstream_ca_file: String,
    /// PEM certificate chain of the gateway listener; with `tls_key_file` the listener
    /// serves HTTPS only. Default empty (plain HTTP).
    pub tls_cert_file: String,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of `tls_cert_file`. Default empty.
    pub tls_key_file: String,
    /// Store URL: `sqlite://PATH` (default `sqlite://./idemgate.db`), `postgres://...`,
    /// `redis://...`, `redis+cluster://...` or `memory://`.
    pub store: String,
    /// PostgreSQL table of the records; empty keeps `idempotency_records`. Default empty.
    pub store_table: String,
    /// Redis key prefix; empty keeps `idemgate:`. Default empty.
    pub store_key_prefix: String,
    /// File holding the bearer token for an `idemgate://` store (a trailing newline is
    /// ignored); the environment variable `IDEMGATE_STORE_TOKEN` overrides it. Default empty.
    pub store_token_file: String,
    /// PEM CA certificates trusted for an `idemgates://` store, instead of the system's
    /// roots. Default empty.
    pub store_ca_file: String,
    /// Run the store's pending migrations at start-up (`idemgate migrate` runs them on
    /// purpose). Default true.
    pub store_migrate: bool,
    /// Deadline of every store call; past it the request gets `503` and is never forwarded
    /// late. Default `2s`.
    pub store_timeout: String,
    /// Outcome writes not yet landed (store slow or down) past which new requests get
    /// `503`. Default 1024.
    pub max_pending_outcomes: usize,
    /// Response bytes held by pending outcome writes past which new requests get `503`.
    /// Default 67108864 (64 MiB).
    pub max_pending_outcome_bytes: usize,
    /// Time allowed for the upstream's response headers. Default `60s`.
    pub upstream_timeout: String,
    /// Most header fields accepted in an upstream response (HTTP/1.1), 1 to
    /// [`MAX_RESPONSE_HEADERS_LIMIT`]; a response with more is `502` and its key fails (the
    /// upstream may have run). Default 256.
    pub max_response_headers: usize,
    /// The key header's name. Default `Idempotency-Key`.
    pub header_name: String,
    /// Methods covered. Default `["POST", "PATCH"]`.
    pub methods: Vec<String>,
    /// Request headers that make some upstream run another path or method (gunicorn's
    /// `SCRIPT_NAME`, method overrides): a covered request carrying one gets `400
    /// ambiguous-request`. `[]` turns the check off (for a front proxy that strips them).
    /// Default [`idemgate_tower::policy::DEFAULT_OVERRIDE_HEADERS`].
    pub override_headers: Vec<String>,
    /// A covered request matching no route: `"default"` (the `[defaults]` policy) or
    /// `"refuse"` (`404 no-such-route`, nothing forwarded). Default `"default"`.
    pub unmatched: String,
    /// The path covered requests are forwarded with: `"as-sent"` (default) or `"normalised"`.
    pub forward_path: String,
    /// Shortest key accepted, in characters. Default 8.
    pub key_min_length: usize,
    /// Longest key accepted, in characters. Default 128.
    pub key_max_length: usize,
    /// Prefix of problem `type` URIs: ending in `:`, the anchor is appended (a URN), else
    /// `#anchor` is (a documentation URL). Default `urn:idemgate:problem:`.
    pub problem_type_base: String,
    /// How often the gateway purges expired records; `"0s"` disables. Default `60s`.
    pub purge_interval: String,
    /// Records deleted per purge batch. Default 1000.
    pub purge_batch: u32,
    /// How often the gateway refreshes the store gauges on `/metrics`; `"0s"` disables.
    /// Default `15s`.
    pub gauges_interval: String,
    /// Secret (at least 16 bytes) of the keyed hashes that stand for keys and principals in
    /// logs; the environment variable `IDEMGATE_LOG_HASH_KEY` overrides it. Empty: a random
    /// secret per process. Default empty.
    pub log_hash_key: String,
    /// Route policy for every covered request, unless a route overrides it.
    pub defaults: RouteConfig,
    /// Per-route policies; fields left out inherit `[defaults]`.
    pub routes: Vec<RouteConfig>,
    /// How bearer tokens are verified for `principal = "jwt:CLAIM"`. Default: absent.
    pub jwt: Option<JwtConfig>,
    /// A file holding a secret (at least 32 bytes; trailing whitespace dropped): routes
    /// with `principal = "authorization"` then scope by an HMAC of the header instead of
    /// its plain SHA-256, so stored principals cannot be cracked offline. Setting, changing
    /// or removing it changes every such caller's scope (README). Default: absent.
    pub principal_hash_key_file: Option<String>,
    /// Let a `SIGHUP` reload change what (principal, route) requests get ([`ScopeSettings`]),
    /// although retries of keys in flight then run again. Default false (refused, logged).
    pub allow_scope_change_on_reload: bool,
    /// `idemgate key-service`: its listeners and calling clients (ignored by `serve`).
    pub key_service: idemgate_key_service::KeyServiceConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".into(),
            admin_listen: "127.0.0.1:9090".into(),
            upstream: String::new(),
            upstream_ca_file: String::new(),
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
            store: "sqlite://./idemgate.db".into(),
            store_table: String::new(),
            store_key_prefix: String::new(),
            store_token_file: String::new(),
            store_ca_file: String::new(),
            store_migrate: true,
            store_timeout: "2s".into(),
            max_pending_outcomes: 1024,
            max_pending_outcome_bytes: 64 << 20,
            upstream_timeout: "60s".into(),
            max_response_headers: 256,
            header_name: "Idempotency-Key".into(),
            methods: vec!["POST".into(), "PATCH".into()],
            override_headers: idemgate_tower::policy::DEFAULT_OVERRIDE_HEADERS
                .map(String::from)
                .to_vec(),
            unmatched: "default".into(),
            forward_path: "as-sent".into(),
            key_min_length: idemgate_core::key::DEFAULT_MIN_LEN,
            key_max_length: idemgate_core::key::DEFAULT_MAX_LEN,
            problem_type_base: idemgate_tower::policy::DEFAULT_PROBLEM_BASE.into(),
            purge_interval: "60s".into(),
            purge_batch: 1000,
            gauges_interval: "15s".into(),
            log_hash_key: String::new(),
            defaults: RouteConfig::builtin(),
            routes: Vec::new(),
            jwt: None,
            principal_hash_key_file: None,
            allow_scope_change_on_reload: false,
            key_service: Default::default(),
        }
    }
}

/// Largest accepted `max_response_headers`: the parser allocates this many slots per
/// response.
pub const MAX_RESPONSE_HEADERS_LIMIT: usize = 4096;

/// A configuration that passed [`Config::validate`].
#[derive(Debug, Clone)]
pub struct Validated {
    /// Gateway listener.
    pub listen: SocketAddr,
    /// Admin listener, if enabled.
    pub admin_listen: Option<SocketAddr>,
    /// Upstream base URL.
    pub upstream: http::Uri,
    /// Store.
    pub store: StoreUrl,
    /// How to open it.
    pub store_options: OpenOptions,
    /// Upstream response-header timeout.
    pub upstream_timeout: Duration,
    /// Most header fields in an upstream response.
    pub max_response_headers: usize,
    /// In-process purge period; `None` disables.
    pub purge_interval: Option<Duration>,
    /// Purge batch size.
    pub purge_batch: std::num::NonZeroU32,
    /// Store gauge refresh period; `None` disables.
    pub gauges_interval: Option<Duration>,
    /// The layer's policy.
    pub policy: Policy,
    /// The log hash secret, if configured.
    pub log_hash_key: Option<String>,
    /// Listener and upstream TLS.
    pub tls: TlsSettings,
    /// What decides requests' scope (a reload compares it with the one applied last).
    pub scope: ScopeSettings,
    /// Whether a reload to this configuration may change [`Validated::scope`].
    pub allow_scope_change_on_reload: bool,
}

impl Config {
    /// Reads and parses a TOML file (syntax, types and unknown keys; see [`Config::validate`]
    /// for values).
    ///
    /// # Errors
    /// A message naming the file and the offending key.
    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        Self::from_toml(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    /// Reads a file leniently: see [`Config::from_toml_lenient`].
    ///
    /// # Errors
    /// The file cannot be read, or has a TOML syntax error (naming the file).
    pub fn load(path: &Path) -> anyhow::Result<(Self, Vec<String>)> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        Self::from_toml_lenient(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    /// Parses TOML text: every unknown key and every type error at once (see
    /// [`Config::from_toml_lenient`]).
    ///
    /// # Errors
    /// A message naming the offending keys, one per line.
    pub fn from_toml(text: &str) -> anyhow::Result<Self> {
        let (config, errs) = Self::from_toml_lenient(text)?;
        if !errs.is_empty() {
            anyhow::bail!("{}", errs.join("\n  "));
        }
        Ok(config)
    }

    /// Checks every value, returning all errors (each `field: problem`), not just the first.
    ///
    /// # Errors
    /// The list of problems found.
    pub fn validate(&self) -> Result<Validated, Vec<String>> {
        let mut errs = Vec::new();
        let listen = parse_addr("listen", &self.listen, &mut errs);
        let admin_listen = if self.admin_listen.trim().is_empty() {
            None
        } else {
            parse_addr("admin_listen", &self.admin_listen, &mut errs)
        };
        // Port 0 asks the system for a free port, a different one for each listener.
        if listen.is_some_and(|a| a.port() != 0) && listen == admin_listen {
            errs.push(format!(
                "admin_listen: `{}` is also `listen`; give it another port",
                self.admin_listen
            ));
        }
        let upstream = parse_upstream(&self.upstream, &mut errs);
        let https = upstream
            .as_ref()
            .is_some_and(|u| u.scheme_str() == Some("https"));
        let tls = self.tls(https, &mut errs);
        let store = StoreUrl::parse(&self.store)
            .map_err(|e| errs.push(format!("store: {e}")))
            .ok();
        self.check_store_token_file(&mut errs);
        let upstream_timeout = duration("upstream_timeout", &self.upstream_timeout, &mut errs);
        if !(1..=MAX_RESPONSE_HEADERS_LIMIT).contains(&self.max_response_headers) {
            errs.push(format!(
                "max_response_headers: must be between 1 and {MAX_RESPONSE_HEADERS_LIMIT}, got {}",
                self.max_response_headers
            ));
        }
        let lifecycle = self.lifecycle(&mut errs);
        // `serve` ignores the section, but `config check` and `key-service` report it.
        if self.key_service != idemgate_key_service::KeyServiceConfig::default() {
            if let Err(e) = self.key_service.validate() {
                errs.extend(e);
            }
        }
        let purge_interval = duration("purge_interval", &self.purge_interval, &mut errs);
        let purge_batch = std::num::NonZeroU32::new(self.purge_batch);
        if purge_batch.is_none() {
            errs.push("purge_batch: must be at least 1".into());
        }
        let gauges_interval =
            duration("gauges_interval", &self.gauges_interval, &mut errs).filter(|d| !d.is_zero());
        let min = idemgate_core::loghash::MIN_SECRET_BYTES;
        if (1..min).contains(&self.log_hash_key.len()) {
            errs.push(format!(
                "log_hash_key: must be at least {min} bytes, or empty"
            ));
        }
        let header_name = parse::header_name("header_name", &self.header_name, &mut errs);
        let methods = parse::methods(&self.methods, &mut errs);
        let override_headers = parse::override_headers(self, header_name.as_ref(), &mut errs);
        if self.key_min_length == 0 || self.key_min_length > self.key_max_length {
            errs.push(format!(
                "key_min_length/key_max_length: need 1 <= min <= max, got {} and {}",
                self.key_min_length, self.key_max_length
            ));
        }
        let defaults = self.defaults.or(&RouteConfig::builtin());
        if defaults.route.is_some() {
            errs.push("defaults.route: routes belong in [[routes]]".into());
        }
        let jwt = self.jwt.as_ref().map(|j| j.verifier(&mut errs));
        let jwt = Jwt::new(self.jwt.is_some(), jwt.flatten());
        let hmac = parse::principal_hash_key(&self.principal_hash_key_file, &mut errs);
        let keyed = |rp: RoutePolicy| parse::keyed_principal(rp, hmac.as_ref());
        let default_route = route_policy("defaults", &defaults, &jwt, &mut errs).map(keyed);
        let mut policy =
            Policy::default().with_default_route(default_route.clone().unwrap_or_default());
        policy.header_name = header_name.unwrap_or(HeaderName::from_static("idempotency-key"));
        policy.methods = methods;
        policy.override_headers = override_headers;
        policy.unmatched = setting("unmatched", Some(&self.unmatched), &mut errs);
        policy.forward_path = setting("forward_path", Some(&self.forward_path), &mut errs);
        policy.key_len = (self.key_min_length, self.key_max_length);
        policy.problem_type_base.clone_from(&self.problem_type_base);
        policy.lifecycle = lifecycle;
        // Routes inherit valid defaults; a bad default is reported once, under `defaults`.
        let inherited = if default_route.is_some() {
            defaults
        } else {
            RouteConfig::builtin()
        };
        let mut seen = std::collections::HashMap::new();
        for (i, r) in self.routes.iter().enumerate() {
            let field = format!("routes[{i}]");
            let rp = route_policy(&field, &r.or(&inherited), &jwt, &mut errs).map(keyed);
            let Some(template) = &r.route else {
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
            match policy.clone().with_route(template, rp.unwrap_or_default()) {
                Ok(p) => policy = p,
                Err(e) => errs.push(format!("{field}.route: {e}")),
            }
        }
        match (
            listen,
            upstream,
            store,
            upstream_timeout,
            purge_interval,
            purge_batch,
        ) {
            (
                Some(listen),
                Some(upstream),
                Some(store),
                Some(upstream_timeout),
                Some(purge),
                Some(purge_batch),
            ) if errs.is_empty() => Ok(Validated {
                listen,
                admin_listen,
                upstream,
                store,
                store_options: self.open_options(),
                upstream_timeout,
                max_response_headers: self.max_response_headers,
                purge_interval: (!purge.is_zero()).then_some(purge),
                purge_batch,
                gauges_interval,
                log_hash_key: (!self.log_hash_key.is_empty()).then(|| self.log_hash_key.clone()),
                tls,
                scope: ScopeSettings::new(self, &policy),
                allow_scope_change_on_reload: self.allow_scope_change_on_reload,
                policy,
            }),
            _ => Err(errs),
        }
    }
}

mod jwt;
mod load;
mod parse;
mod route;
mod scope;
mod store;
#[cfg(test)]
mod tests;
mod tls;

pub use jwt::JwtConfig;
use parse::{duration, parse_addr, parse_upstream, setting};
pub use route::RouteConfig;
use route::{route_policy, Jwt};
pub use scope::ScopeSettings;
pub use tls::TlsSettings;
