//! `idemgate key-service`: the [`idemgate_key_service`] API on the store the configuration
//! names, with the gateway's listeners (TLS via `tls_cert_file`/`tls_key_file`), admin
//! endpoints, purge loop, store gauges and graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::extract::State;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::serve::ListenerExt;
use axum::Router;
use clap::Args;
use http::StatusCode;
use idemgate_core::{IdempotencyStore, Lifecycle};
use idemgate_key_service::{KeyService, KeyServiceSettings};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::{Config, Validated};
use crate::purge::{PurgeOptions, QuietProgress};
use crate::store::AnyStore;
use crate::tls::TlsListener;

/// Flags of `key-service` (they override the file).
#[derive(Debug, Args)]
pub struct KeyServiceArgs {
    /// TOML configuration file: `store*`, `tls_*`, `purge_*`, `gauges_interval` and the
    /// `[key_service]` section (`upstream` is not needed).
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
    /// The shared settings (store, TLS, purge, gauges, store deadline).
    pub base: Validated,
    /// The `[key_service]` section.
    pub service: KeyServiceSettings,
}

impl KeyServiceArgs {
    /// The file (if any) with the flags applied, validated.
    ///
    /// # Errors
    /// Every problem found, one per line, each naming its field.
    pub fn resolve(&self) -> anyhow::Result<KeyServiceConfig> {
        let (mut config, mut errs) = match &self.config {
            Some(path) => Config::load(path)?,
            None => (Config::default(), Vec::new()),
        };
        if let Some(v) = &self.listen {
            config.key_service.listen.clone_from(v);
        }
        if let Some(v) = &self.admin_listen {
            config.key_service.admin_listen.clone_from(v);
        }
        if let Some(v) = &self.store {
            config.store.clone_from(v);
        }
        resolve(config, &mut errs)
    }
}

/// Validates `config` for the key service (its gateway-only keys need no values).
///
/// # Errors
/// Every problem, one per line.
pub fn resolve(mut config: Config, errs: &mut Vec<String>) -> anyhow::Result<KeyServiceConfig> {
    if matches!(
        crate::store::StoreUrl::parse(&config.store),
        Ok(crate::store::StoreUrl::KeyService(_))
    ) {
        errs.push("store: a key service cannot keep its records in another key service".into());
    }
    // `serve`'s own listeners and upstream do not apply here.
    config.upstream = "http://upstream.invalid".into();
    config.listen = "127.0.0.1:0".into();
    config.admin_listen = String::new();
    let service = config.key_service.validate();
    let base = config.validate();
    match (base, service) {
        (Ok(base), Ok(service)) if errs.is_empty() => Ok(KeyServiceConfig { base, service }),
        (base, service) => {
            match base {
                // Holds the section's errors too (see `Config::validate`).
                Err(e) => errs.extend(e),
                Ok(_) => errs.extend(service.err().unwrap_or_default()),
            }
            anyhow::bail!("invalid configuration:\n  {}", errs.join("\n  "))
        }
    }
}

/// `idemgate key-service`: binds the listeners, opens the store and serves until
/// `shutdown`.
///
/// # Errors
/// A listener cannot be bound or the store cannot be opened.
pub async fn command(
    args: KeyServiceArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let config = args.resolve()?;
    if let Some(secret) = &config.base.log_hash_key {
        idemgate_core::loghash::set_secret(secret.as_bytes())
            .map_err(|e| anyhow::anyhow!("log_hash_key: {e}"))?;
    }
    let listener = TcpListener::bind(config.service.listen)
        .await
        .with_context(|| format!("key_service.listen: cannot bind {}", config.service.listen))?;
    let admin = match config.service.admin_listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("key_service.admin_listen: cannot bind {addr}"))?,
        ),
        None => None,
    };
    let store = Arc::new(AnyStore::open(&config.base.store, &config.base.store_options).await?);
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
    crate::server::prometheus();
    crate::telemetry::register_key_service(&config.service, store.backend());
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let lifecycle = Lifecycle::new(store.clone(), config.base.policy.lifecycle.clone());
    let app = idemgate_key_service::router(KeyService::new(lifecycle, &config.service));
    if let Some(admin) = admin {
        let admin_app = Router::new()
            .route("/healthz", get(|| async { "ok\n" }))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics_text))
            .with_state(store.clone());
        tracing::info!(admin = %admin.local_addr()?, "idemgate key service admin listening");
        let rx = stop_rx.clone();
        tokio::spawn(async move {
            if let Err(e) = axum::serve(admin, admin_app)
                .with_graceful_shutdown(stopped(rx))
                .await
            {
                tracing::error!(error = %e, "admin listener failed");
            }
        });
    }
    background(&config.base, &store, &stop_rx);
    tracing::info!(
        listen = %listener.local_addr()?,
        tls = config.base.tls.listener.is_some(),
        store = store.backend(),
        "idemgate key service listening"
    );
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    match &config.base.tls.listener {
        Some(tls) => {
            let tls = TlsListener::new(listener, tls.clone()).tap_io(|_| {});
            axum::serve(tls, app)
                .with_graceful_shutdown(stopped(stop_rx))
                .await?
        }
        None => {
            axum::serve(listener, app)
                .with_graceful_shutdown(stopped(stop_rx))
                .await?
        }
    }
    Ok(())
}

/// The purge loop and the store gauges, as `serve` runs them.
fn background(config: &Validated, store: &Arc<AnyStore>, stop_rx: &watch::Receiver<bool>) {
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    if let Some(every) = config.purge_interval {
        let (store, rx) = (store.clone(), stop_rx.clone());
        let opts = PurgeOptions {
            batch: config.purge_batch,
            max_rate: None,
            dry_run: false,
        };
        tokio::spawn(async move {
            let quiet = || Box::new(QuietProgress) as Box<dyn crate::purge::Progress>;
            crate::purge::watch(&*store, opts, every, false, quiet, stopped(rx)).await;
        });
    }
    if let Some(every) = config.gauges_interval {
        let (store, rx) = (store.clone(), stop_rx.clone());
        tokio::spawn(async move { crate::gauges::refresh(&*store, every, stopped(rx)).await });
    }
}

async fn readyz(State(store): State<Arc<AnyStore>>) -> impl IntoResponse {
    match tokio::time::timeout(Duration::from_secs(2), store.ping()).await {
        Ok(Ok(())) => (StatusCode::OK, "ready\n".to_owned()),
        Ok(Err(e)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{}\n", crate::store::describe(&e)),
        ),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "store timed out\n".to_owned(),
        ),
    }
}

async fn metrics_text() -> impl IntoResponse {
    match crate::server::prometheus() {
        Some(h) => (StatusCode::OK, h.render()),
        None => (
            StatusCode::NOT_FOUND,
            "metrics recorder unavailable\n".into(),
        ),
    }
}
