//! `idemgate key-service`: the [`idemgate_key_service`] API on the store the configuration
//! names, as a [`Service`](crate::host::Service) of the [`Host`]: the gateway's listeners
//! (TLS via `tls_cert_file`/`tls_key_file`), admin endpoints, purge loop, store gauges and
//! graceful shutdown.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use idemgate_core::{IdempotencyStore, Lifecycle};
use idemgate_key_service::{KeyService, KeyServiceSettings};
use tokio::net::TcpListener;

use crate::cli::set;
use crate::config::{Base, Config};
use crate::host::Host;
use crate::store::{AnyStore, StoreUrl};

/// Flags of `key-service` (they override the file).
#[derive(Debug, Args)]
pub struct KeyServiceArgs {
    /// TOML configuration file: `store*`, `tls_*`, `purge_*`, `gauges_interval`, the
    /// connection bounds (`header_read_timeout`, `body_read_timeout`, `idle_timeout`,
    /// `max_connections`) and the `[key_service]` section (`upstream` is not needed).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// API listen address [default: 127.0.0.1:8081].
    #[arg(long)]
    pub listen: Option<String>,
    /// Admin listen address for /healthz, /readyz, /metrics [default: 127.0.0.1:9091]; ""
    /// disables it.
    #[arg(long)]
    pub admin_listen: Option<String>,
    /// Store URL: sqlite://PATH [default: sqlite://./idemgate.db], postgres://...,
    /// redis://..., memory://.
    #[arg(long)]
    pub store: Option<String>,
}

/// A key-service configuration that passed validation.
#[derive(Debug, Clone)]
pub struct KeyServiceConfig {
    /// The sections shared with `serve` (store, engine, TLS, routes).
    pub base: Base,
    /// The `[key_service]` section.
    pub service: KeyServiceSettings,
}

impl KeyServiceArgs {
    /// The file (if any) with the flags applied, validated.
    ///
    /// # Errors
    /// Every problem found, one per line, each naming its field.
    pub fn resolve(&self) -> anyhow::Result<KeyServiceConfig> {
        let (mut config, mut errs) = Config::load(self.config.as_deref())?;
        set(&mut config.key_service.listen, &self.listen);
        set(&mut config.key_service.admin_listen, &self.admin_listen);
        set(&mut config.store, &self.store);
        resolve(config, &mut errs)
    }
}

/// Validates `config` for the key service: its sections ([`Config::base`] and
/// `[key_service]`), not the gateway's listeners and upstream.
///
/// # Errors
/// Every problem, one per line.
pub fn resolve(config: Config, errs: &mut Vec<String>) -> anyhow::Result<KeyServiceConfig> {
    if let Ok(StoreUrl::KeyService(_)) = StoreUrl::parse(&config.store) {
        errs.push("store: a key service cannot keep its records in another key service".into());
    }
    let base = config.base(false, errs);
    let service = config.key_service.validate().map_err(|e| errs.extend(e));
    match (base, service) {
        (Some(base), Ok(service)) if errs.is_empty() => Ok(KeyServiceConfig { base, service }),
        _ => Err(crate::cli::invalid(errs)),
    }
}

/// `idemgate key-service`: binds the listeners, opens the store ([`crate::host::prepare`])
/// and serves until `shutdown`.
///
/// # Errors
/// A listener cannot be bound or the store cannot be opened.
pub async fn command(
    args: KeyServiceArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let config = args.resolve()?;
    let listen = ("key_service.listen", config.service.listen);
    let admin = ("key_service.admin_listen", config.service.admin_listen);
    let (listener, admin, store) = crate::host::prepare(&config.base, listen, admin).await?;
    run(config, store, listener, admin, shutdown).await
}

/// Serves the key service on `listener` (admin endpoints on `admin`) until `shutdown`
/// resolves, then lets requests in flight finish.
///
/// # Errors
/// When a listener fails.
pub async fn run(
    config: KeyServiceConfig,
    store: Arc<AnyStore>,
    listener: TcpListener,
    admin: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    // The key service's problem types are always under the default base (its clients read
    // them); `problem_type_base` is the gateway's.
    let mut base = config.base.clone();
    base.policy.problem_type_base = idemgate_core::problem::DEFAULT_BASE.into();
    let host = Host::start(&base, &store, admin, shutdown);
    crate::telemetry::register_key_service(&config.service, store.backend());
    let lifecycle = Lifecycle::new(store.clone(), config.base.policy.lifecycle.clone())
        .with_keyring(config.base.keyring.clone());
    let service = KeyService::new(lifecycle, &config.service);
    let router = idemgate_key_service::router(service.clone());
    tracing::info!(
        listen = %listener.local_addr()?,
        tls = config.base.tls.listener.is_some(),
        store = store.backend(),
        "idemgate key service listening"
    );
    host.run(listener, App { router, service }).await
}

/// The key service's API, whose waits end when shutdown begins.
struct App {
    router: axum::Router,
    service: Arc<KeyService<AnyStore>>,
}

impl crate::host::Service for App {
    type App = axum::Router;

    fn app(&self) -> axum::Router {
        self.router.clone()
    }

    /// `/v1/acquire` calls waiting with `wait_ms` answer `in_flight`, and `/v1/wait` calls
    /// answer, at once ([`KeyService::end_waits`]).
    fn on_stop(&self) -> impl FnOnce() + Send + 'static {
        let service = self.service.clone();
        move || service.end_waits()
    }
}
