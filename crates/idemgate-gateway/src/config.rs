//! The gateway's configuration: a TOML file, overridden by CLI flags.
//!
//! Unknown keys are rejected with their name; durations are humantime strings (`"24h"`,
//! `"10s"`, `"250ms"`); integer keys carry their unit in the name (`max_body_bytes`).
//! [`Config::validate`] reports every error at once, each naming its field.
//! `docs/gateway.example.toml` lists every key with its default.

use std::path::Path;

use http::HeaderName;
use idemgate_tower::policy::Principals;
use idemgate_tower::{Policy, PrincipalSource};
use serde::{Deserialize, Serialize};

/// The whole file. Every field has the DESIGN.md default.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
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
    /// Store URL: `sqlite://PATH`, `postgres://...` (with several hosts,
    /// `postgres://u@h1,h2/db?target_session_attrs=read-write`, it follows a failover),
    /// `redis://...`, `rediss://...`, `redis+cluster://h:p,h:p`,
    /// `redis+sentinel://h:p,h:p/MASTER`, `idemgate://host:port` (a key service;
    /// `idemgates://` with TLS) or `memory://`. Default `sqlite://./idemgate.db`.
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
    /// PostgreSQL only: the most connections the store's pool opens, from 1 to 1000. Each is
    /// a server backend: keep the sum over every gateway and key service on the database
    /// below its `max_connections`. Opened as requests need them, closed after 10 minutes
    /// idle. A URL with several hosts keeps one more, outside the pool, that watches for a
    /// failover. With `require_synchronous_replication`, writes hold at most three quarters of
    /// them. Restart-only. Default 16.
    pub store_max_connections: u32,
    /// PostgreSQL only: every write waits until a synchronous standby has it, so a failover
    /// to that standby loses no record (docs/postgres-ha.md). The gateway refuses to start
    /// while the server's `synchronous_standby_names` is empty, and new keys get `503` (replays
    /// are still served, `/readyz` says why) while no synchronous standby confirms writes. Needs
    /// the `pg_monitor` role. Restart-only. Default false.
    pub require_synchronous_replication: bool,
    /// Redis only (not `redis+cluster://`): replicas that must acknowledge each new record and
    /// each outcome (Redis `WAIT`) before the gateway goes on; 0 waits for none. A write not
    /// acknowledged within `redis_wait_timeout` counts as unconfirmed. At most 16. Restart-only.
    /// Default 0.
    pub redis_wait_replicas: u32,
    /// How long a write waits for `redis_wait_replicas` acknowledgements, at least `1ms` and
    /// below `store_timeout`. Restart-only. Default `500ms`.
    pub redis_wait_timeout: String,
    /// PostgreSQL only: the forward journal, a local SQLite file (created if missing, locked
    /// by the one process that runs on it) where `serve` and `key-service` write each key they
    /// acquire before forwarding it, and then its outcome, until a standby has replayed them.
    /// After a failover to a standby that lacked them, the entries are written back to the new
    /// primary (never over an outcome), and a restart refuses a former primary brought back
    /// read-write (docs/postgres-ha.md, "The forward journal"). Costs one fsync'd local write
    /// per new key and per outcome. Entries hold responses as the store does (sealed with
    /// `encryption_key_files`). A relative path is resolved against the working directory.
    /// Restart-only. Default empty (off).
    pub forward_journal_file: String,
    /// The longest a journal entry is kept without a standby confirming it: then it is
    /// dropped, logged and counted in `idempotency_forward_journal_expired_total` (a failover
    /// after that can run its key again). From `1s` to `24h`. Restart-only. Default `10m`.
    pub forward_journal_window: String,
    /// With `forward_journal_file`: after a failover, new keys get `503` (replays are still
    /// served) until this long after the first process on the store noticed it, so every
    /// journal restores its entries first; a process that starts during it waits too. From
    /// `2s` to `10m`: above the time every process needs to notice the failover (connections
    /// are checked once a second) and restore its entries. Restart-only. Default `10s`.
    pub failover_grace: String,
    /// Outcome writes not yet landed (store slow or down) past which new requests get
    /// `503`. Default 1024.
    pub max_pending_outcomes: usize,
    /// Response bytes held by pending outcome writes past which new requests get `503`.
    /// Default 67108864 (64 MiB).
    pub max_pending_outcome_bytes: usize,
    /// Duplicates waiting on in-flight keys (routes with `on_in_flight = "wait"`) past which
    /// a further one gets `409 request-in-flight` at once, 1 to 1000000. Restart-only.
    /// Default 10000.
    pub max_waiters: usize,
    /// Time allowed for the upstream's response headers. Default `60s`.
    pub upstream_timeout: String,
    /// Most header fields accepted in an upstream response (HTTP/1.1), 1 to 4096
    /// ([`MAX_RESPONSE_HEADERS_LIMIT`]); a response with more is `502` and its key fails (the
    /// upstream may have run). Default 256.
    pub max_response_headers: usize,
    /// Longest time a client may take to send a whole request head: from the accept (after
    /// the TLS handshake) for its first request, from the head's first byte for the next
    /// ones. Past it the client gets `408 request-timeout` and the connection is closed. Every
    /// listener of `serve` and `key-service`, the admin listener too. Restart-only. Default
    /// `10s`.
    pub header_read_timeout: String,
    /// Longest wait for the next bytes of a request body. Past it the request gets `408
    /// request-timeout` and the connection is closed; a request with a key then stores and
    /// forwards nothing. Every listener. Restart-only. Default `30s`.
    pub body_read_timeout: String,
    /// Longest time a kept-alive connection waits for the next request once a response ended;
    /// past it the connection is closed. Every listener. Restart-only. Default `60s`.
    pub idle_timeout: String,
    /// Most connections open at once on the gateway's (or the key service's) listener, 1 to
    /// 1000000; past it new ones wait in the listen backlog until one closes (the admin
    /// listener has its own 128). The gateway warns at start-up when the open-file limit is
    /// below 2 × `max_connections` (each client's request may hold an upstream connection) +
    /// 384 (1 × for the key service). Restart-only. Default 10000.
    pub max_connections: usize,
    /// The key header's name. Default `Idempotency-Key`.
    pub header_name: String,
    /// Methods covered on every path; a `[[routes]]` entry covers its own method too
    /// (`PUT /payments` covers PUT on that route). Default `["POST", "PATCH"]`.
    pub methods: Vec<String>,
    /// Request headers that make some upstream run another path or method (gunicorn's
    /// `SCRIPT_NAME`, method overrides): a covered request carrying one gets `400
    /// ambiguous-request`. `[]` turns the check off (for a front proxy that strips them).
    /// Default [`idemgate_tower::policy::DEFAULT_OVERRIDE_HEADERS`].
    pub override_headers: Vec<String>,
    /// A covered request matching no route: `"default"` (the `[defaults]` policy, scoped by
    /// its path) or `"refuse"` (`404 no-such-route`, nothing forwarded; a `[[routes]]`
    /// entry's method is covered on every path). Default `"default"`.
    pub unmatched: String,
    /// The path covered requests are forwarded with: `"as-sent"` (default) or `"normalised"`
    /// (the normal form routes are matched in); the fingerprint reads the forwarded path.
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
    /// How often the gateway refreshes the store gauges on `/metrics` and re-reads what the
    /// store can lose (logged when it changes); `"0s"` disables the gauges, and what the store
    /// can lose is then re-read every 15 s (`/readyz` depends on it). Default `15s`.
    pub gauges_interval: String,
    /// Secret (at least 16 bytes) of the keyed hashes that stand for keys and principals in
    /// logs; the environment variable `IDEMGATE_LOG_HASH_KEY` overrides it. Empty: a random
    /// secret per process. Default empty.
    pub log_hash_key: String,
    /// Files of the keys that encrypt stored responses at rest (docs/security.md), each
    /// holding 64 hex digits (32 bytes, e.g. `openssl rand -hex 32`), read once at start-up and
    /// never logged. The first seals every new response (XChaCha20-Poly1305); every one opens
    /// the records sealed with it, so rotate by adding the new key first and removing the old
    /// one once `idemgate stats` counts no record under its key id. A record sealed with a key
    /// not listed answers `500 record-corrupt`. Only once every process runs a build that
    /// knows encryption: an older one reads sealed records as corrupt. Relative paths are
    /// resolved against the working directory. Restart-only. Default empty (responses stored
    /// in clear).
    pub encryption_key_files: Vec<String>,
    /// Route policy for every covered request, unless a route overrides it: an overlay on
    /// [`idemgate_tower::RoutePolicy::default`], with the keys of
    /// [`idemgate_tower::policy::RouteEntry`].
    pub defaults: RouteTable,
    /// Per-route policies, each an overlay on `[defaults]`.
    pub routes: Vec<RouteTable>,
    /// How bearer tokens are verified for `principal = "jwt:CLAIM"`. Default: absent.
    pub jwt: Option<JwtConfig>,
    /// A file holding a secret (at least 32 bytes; trailing whitespace dropped): routes
    /// with `principal = "authorization"` then scope by an HMAC-SHA256 of the header under
    /// it (`hauth:…`) instead of its plain SHA-256 (`auth:…`), so a stored principal of a
    /// Basic-auth or short API-key header cannot be cracked offline. Setting, changing
    /// or removing it changes every such caller's scope (docs/configuration.md, "Choosing
    /// the principal"). Default: absent.
    pub principal_hash_key_file: Option<String>,
    /// Let a `SIGHUP` reload change what (principal, route) requests get ([`ScopeSettings`]),
    /// although retries of keys in flight then run again; otherwise such a reload is refused
    /// and logged. Default false.
    pub allow_scope_change_on_reload: bool,
    /// `idemgate key-service`: its listeners and calling clients (ignored by `serve`).
    pub key_service: idemgate_key_service::KeyServiceConfig,
}

impl Default for Config {
    fn default() -> Self {
        // The engine's settings are the lifecycle's defaults, written there.
        let engine = idemgate_core::lifecycle::LifecycleConfig::default();
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
            store_timeout: humantime::format_duration(engine.store_timeout).to_string(),
            store_max_connections: 16,
            require_synchronous_replication: false,
            redis_wait_replicas: 0,
            redis_wait_timeout: "500ms".into(),
            forward_journal_file: String::new(),
            forward_journal_window: "10m".into(),
            failover_grace: "10s".into(),
            max_pending_outcomes: engine.max_pending_outcomes,
            max_pending_outcome_bytes: engine.max_pending_outcome_bytes,
            max_waiters: engine.max_waiters,
            upstream_timeout: "60s".into(),
            max_response_headers: 256,
            header_read_timeout: "10s".into(),
            body_read_timeout: "30s".into(),
            idle_timeout: "60s".into(),
            max_connections: 10_000,
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
            encryption_key_files: Vec::new(),
            defaults: RouteTable::default(),
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

impl Config {
    /// Reads and parses a TOML file (syntax, types and unknown keys; see [`Config::validate`]
    /// for values).
    ///
    /// # Errors
    /// A message naming the file and the offending key.
    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let (config, errs) = Self::load(Some(path))?;
        if !errs.is_empty() {
            anyhow::bail!("{}: {}", path.display(), errs.join("\n  "));
        }
        Ok(config)
    }

    /// Reads a file leniently (see [`Config::from_toml_lenient`]); without one (`None`), the
    /// defaults.
    ///
    /// # Errors
    /// The file cannot be read, or has a TOML syntax error (naming the file).
    pub fn load(path: Option<&Path>) -> anyhow::Result<(Self, Vec<String>)> {
        let Some(path) = path else {
            return Ok((Self::default(), Vec::new()));
        };
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

    /// The routes section: the key header, covered methods and the route policies; every
    /// problem goes to `errs` as `field: problem`.
    pub(crate) fn routes_section(&self, errs: &mut Vec<String>) -> Policy {
        let header_name = parse::header_name("header_name", &self.header_name, errs);
        let methods = parse::methods(&self.methods, errs);
        let override_headers = parse::override_headers(self, header_name.as_ref(), errs);
        if self.key_min_length == 0 || self.key_min_length > self.key_max_length {
            errs.push(format!(
                "key_min_length/key_max_length: need 1 <= min <= max, got {} and {}",
                self.key_min_length, self.key_max_length
            ));
        }
        // `[jwt]` absent, broken (reported under `jwt`) or its verifier.
        let jwt = self.jwt.as_ref().map(|j| j.verifier(errs));
        let hash_key = parse::principal_hash_key(&self.principal_hash_key_file, errs);
        let mut policy = Policy::default();
        policy.header_name = header_name.unwrap_or(HeaderName::from_static("idempotency-key"));
        policy.methods = methods;
        policy.override_headers = override_headers;
        policy.unmatched = setting("unmatched", Some(&self.unmatched), errs);
        policy.forward_path = setting("forward_path", Some(&self.forward_path), errs);
        policy.key_len = (self.key_min_length, self.key_max_length);
        policy.problem_type_base.clone_from(&self.problem_type_base);
        let principals = Principals {
            jwt: &|claim| match &jwt {
                Some(Some(verifier)) => Ok(PrincipalSource::Jwt {
                    claim: claim.to_owned(),
                    verifier: verifier.clone(),
                }),
                Some(None) => Ok(PrincipalSource::AuthorizationHash),
                None => Err("needs a [jwt] table with hs256_secret_file and/or jwks_file".into()),
            },
            hash_key: hash_key.as_ref(),
        };
        let routes = self.routes.iter().map(|r| &r.0);
        policy.with_route_tables(&self.defaults.0, routes, principals, errs)
    }
}

mod journal;
mod jwt;
mod limits;
mod load;
mod parse;
mod route;
mod scope;
mod sections;
mod store;
#[cfg(test)]
mod tests;
mod tls;

pub use jwt::JwtConfig;
pub use limits::MAX_CONNECTIONS_LIMIT;
use parse::setting;
pub use route::RouteTable;
pub use scope::ScopeSettings;
pub use sections::{AdminView, Base, Validated};
pub use tls::TlsSettings;
