//! The sections of a [`Config`], each validated by its owner, so that a command checks only
//! what it uses: the store and the engine (`config/store.rs`), the routes
//! ([`Config::routes_section`]), the gateway's listeners and upstream (here, `serve` only),
//! `[key_service]` (its crate), TLS (`config/tls.rs`).
//!
//! | command | sections |
//! |---|---|
//! | `serve` | all ([`Config::validate`]; `[key_service]` when set) |
//! | `config check` | all, `upstream` optional ([`Config::check`]) |
//! | `key-service` | store, engine, listener TLS, routes, `[key_service]` ([`Config::base`]) |
//! | `inspect`, `release`, `resolve`, `stats` | routes, `upstream_timeout` ([`Config::admin_view`]) |
//! | `openapi` | routes |

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use idemgate_tower::Policy;

use super::parse::{duration, parse_addr, parse_upstream};
use super::{Config, ScopeSettings, TlsSettings, MAX_RESPONSE_HEADERS_LIMIT};
use crate::store::{OpenOptions, StoreUrl};

/// A configuration that passed [`Config::validate`]: the gateway section and the [`Base`]
/// sections ([`Validated::base`]).
#[derive(Debug, Clone)]
pub struct Validated {
    /// Gateway listener.
    pub listen: SocketAddr,
    /// Admin listener, if enabled.
    pub admin_listen: Option<SocketAddr>,
    /// Upstream base URL.
    pub upstream: http::Uri,
    /// Upstream response-header timeout.
    pub upstream_timeout: Duration,
    /// Most header fields in an upstream response.
    pub max_response_headers: usize,
    /// The sections shared with the key service: store, engine, TLS, routes.
    pub base: Base,
}

/// The sections every serving command uses (`serve`, `key-service`): store, engine,
/// listener TLS and connections, and routes.
#[derive(Debug, Clone)]
pub struct Base {
    /// Store.
    pub store: StoreUrl,
    /// How `serve` and `key-service` open it (with the forward journal, if any).
    pub store_options: OpenOptions,
    /// In-process purge period; `None` disables.
    pub purge_interval: Option<Duration>,
    /// Purge batch size.
    pub purge_batch: NonZeroU32,
    /// Store gauge refresh period; `None` disables.
    pub gauges_interval: Option<Duration>,
    /// The layer's policy, with the engine's lifecycle settings.
    pub policy: Policy,
    /// The log hash secret, if configured.
    pub log_hash_key: Option<String>,
    /// The keys of `encryption_key_files`, if any: responses are sealed at rest.
    pub keyring: Option<std::sync::Arc<idemgate_core::seal::Keyring>>,
    /// Listener and upstream TLS.
    pub tls: TlsSettings,
    /// What decides requests' scope (a reload compares it with the one applied last).
    pub scope: ScopeSettings,
    /// Whether a reload to this configuration may change [`Base::scope`].
    pub allow_scope_change_on_reload: bool,
    /// The listeners' timeouts and `max_connections`.
    pub connections: crate::connections::Limits,
}

/// What the admin commands read from the gateways' file: the route policies and the
/// gateways' `upstream_timeout` (no upstream, listener or store file needed).
#[derive(Debug, Clone)]
pub struct AdminView {
    /// The route policies (principal sources, `max_lease`).
    pub policy: Policy,
    /// The gateways' `upstream_timeout`.
    pub upstream_timeout: Duration,
}

/// The gateway section's values, each `None` when invalid (and reported).
struct Gateway {
    listen: Option<SocketAddr>,
    admin_listen: Option<SocketAddr>,
    upstream: Option<http::Uri>,
    upstream_timeout: Option<Duration>,
}

impl Gateway {
    /// The configuration, when this section and `base` are valid.
    fn validated(self, max_response_headers: usize, base: Option<Base>) -> Option<Validated> {
        Some(Validated {
            listen: self.listen?,
            admin_listen: self.admin_listen,
            upstream: self.upstream?,
            upstream_timeout: self.upstream_timeout?,
            max_response_headers,
            base: base?,
        })
    }
}

impl Config {
    /// Checks every section `serve` uses, and `[key_service]` when it is set (`serve`
    /// ignores it, but `config check` reports it): every error at once, each `field:
    /// problem`.
    ///
    /// # Errors
    /// The list of problems found.
    pub fn validate(&self) -> Result<Validated, Vec<String>> {
        let mut errs = Vec::new();
        let gateway = self.gateway_section(true, &mut errs);
        let base = self.sections(&gateway, &mut errs);
        let valid = gateway.validated(self.max_response_headers, base);
        valid.filter(|_| errs.is_empty()).ok_or(errs)
    }

    /// `config check`: what [`Config::validate`] reports, but `upstream` may be left out
    /// (`serve --upstream` gives it).
    pub fn check(&self) -> Vec<String> {
        let mut errs = Vec::new();
        let gateway = self.gateway_section(false, &mut errs);
        self.sections(&gateway, &mut errs);
        errs
    }

    /// What the admin commands read: the routes and `upstream_timeout`.
    ///
    /// # Errors
    /// Every problem found in those.
    pub fn admin_view(&self) -> Result<AdminView, Vec<String>> {
        let mut errs = Vec::new();
        let policy = self.routes_section(&mut errs);
        let upstream_timeout = duration("upstream_timeout", &self.upstream_timeout, &mut errs);
        match upstream_timeout {
            Some(upstream_timeout) if errs.is_empty() => Ok(AdminView {
                policy,
                upstream_timeout,
            }),
            _ => Err(errs),
        }
    }

    /// The [`Base`] and `[key_service]` (when set) of `serve` and `config check`.
    fn sections(&self, gateway: &Gateway, errs: &mut Vec<String>) -> Option<Base> {
        let upstream = gateway.upstream.as_ref();
        let https = upstream.is_some_and(|u| u.scheme_str() == Some("https"));
        let base = self.base(https, errs);
        if let (Some(base), Some(timeout)) = (&base, gateway.upstream_timeout) {
            wait_bounds(&base.policy, timeout, errs);
        }
        if self.key_service != idemgate_key_service::KeyServiceConfig::default() {
            errs.extend(self.key_service.validate().err().unwrap_or_default());
        }
        base
    }

    /// The gateway section: listeners, upstream, its timeout and header bound.
    fn gateway_section(&self, need_upstream: bool, errs: &mut Vec<String>) -> Gateway {
        let listen = parse_addr("listen", &self.listen, errs);
        let admin_listen = if self.admin_listen.trim().is_empty() {
            None
        } else {
            parse_addr("admin_listen", &self.admin_listen, errs)
        };
        // Port 0 asks the system for a free port, a different one for each listener.
        if listen.is_some_and(|a| a.port() != 0) && listen == admin_listen {
            errs.push(format!(
                "admin_listen: `{}` is also `listen`; give it another port",
                self.admin_listen
            ));
        }
        let upstream = (need_upstream || !self.upstream.is_empty())
            .then(|| parse_upstream(&self.upstream, errs))
            .flatten();
        let upstream_timeout = duration("upstream_timeout", &self.upstream_timeout, errs);
        if !(1..=MAX_RESPONSE_HEADERS_LIMIT).contains(&self.max_response_headers) {
            errs.push(format!(
                "max_response_headers: must be between 1 and {MAX_RESPONSE_HEADERS_LIMIT}, got {}",
                self.max_response_headers
            ));
        }
        Gateway {
            listen,
            admin_listen,
            upstream,
            upstream_timeout,
        }
    }

    /// The sections every serving command uses: store, engine, listener TLS (and the
    /// upstream's roots when `https_upstream`; a key service has no upstream) and routes;
    /// every problem goes to `errs`.
    pub fn base(&self, https_upstream: bool, errs: &mut Vec<String>) -> Option<Base> {
        let before = errs.len();
        let tls = self.tls(https_upstream, errs);
        let store = self.store_section(errs);
        let engine = self.engine_section(errs);
        let min = idemgate_core::loghash::MIN_SECRET_BYTES;
        if (1..min).contains(&self.log_hash_key.len()) {
            errs.push(format!(
                "log_hash_key: must be at least {min} bytes, or empty"
            ));
        }
        let store_timeout = engine.lifecycle.store_timeout;
        self.replication_section(store.as_ref(), store_timeout, errs);
        self.pool_section(store.as_ref(), errs);
        self.journal_section(store.as_ref(), errs);
        let connections = self.connection_section(errs);
        let keyring = self.keyring(errs);
        let mut policy = self.routes_section(errs);
        policy.lifecycle = engine.lifecycle;
        Some(Base {
            store: store?,
            store_options: self.serving_open_options(),
            purge_interval: Some(engine.purge_interval?).filter(|d| !d.is_zero()),
            purge_batch: engine.purge_batch?,
            gauges_interval: engine.gauges_interval,
            log_hash_key: (!self.log_hash_key.is_empty()).then(|| self.log_hash_key.clone()),
            keyring: keyring?,
            tls,
            scope: ScopeSettings::new(self, &policy),
            allow_scope_change_on_reload: self.allow_scope_change_on_reload,
            connections: connections?,
            policy,
        })
        .filter(|_| errs.len() == before)
    }
}

impl Config {
    /// The keyring of `encryption_key_files` (`Some(None)` when there are none); `None`
    /// after pushing the problem to `errs` (the message names the file, never its bytes).
    fn keyring(
        &self,
        errs: &mut Vec<String>,
    ) -> Option<Option<std::sync::Arc<idemgate_core::seal::Keyring>>> {
        if self.encryption_key_files.is_empty() {
            return Some(None);
        }
        let paths: Vec<&str> = self.encryption_key_files.iter().map(|p| p.trim()).collect();
        match idemgate_core::seal::Keyring::load(&paths) {
            Ok(ring) => Some(Some(std::sync::Arc::new(ring))),
            Err(e) => {
                errs.push(format!("encryption_key_files: {e}"));
                None
            }
        }
    }
}

/// The shortest `max_wait` of a route whose duplicates wait (a shorter one is no wait).
const MIN_WAIT: Duration = Duration::from_millis(100);

/// A duplicate may not wait past `upstream_timeout` (the run it waits for ends by then), nor
/// less than [`MIN_WAIT`].
fn wait_bounds(policy: &Policy, upstream_timeout: Duration, errs: &mut Vec<String>) {
    let routes = std::iter::once(("[defaults]", policy.default_route())).chain(policy.routes());
    for (route, rp) in routes {
        let waits = rp.on_in_flight == idemgate_core::lifecycle::InFlightPolicy::Wait;
        if waits && rp.max_wait < MIN_WAIT {
            errs.push(format!(
                "max_wait: {} on {route} is below {} with on_in_flight = \"wait\"",
                humantime::format_duration(rp.max_wait),
                humantime::format_duration(MIN_WAIT),
            ));
        }
        if rp.waits_longer_than(upstream_timeout) {
            errs.push(format!(
                "max_wait: {} on {route} is above upstream_timeout ({}); a duplicate would wait past the run it waits for",
                humantime::format_duration(rp.max_wait),
                humantime::format_duration(upstream_timeout),
            ));
        }
    }
}
