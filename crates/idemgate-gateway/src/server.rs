//! Running the gateway: the proxy listener, the admin listener, the purge and the store
//! gauges.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::error_handling::HandleError;
use axum::extract::State;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::serve::ListenerExt;
use axum::Router;
use http::{Response, StatusCode};
use idemgate_core::{BoxError, IdempotencyStore, PurgeHandle};
use idemgate_tower::body::BoxBody;
use idemgate_tower::{IdempotencyLayer, IdempotencyRejection, NotSent};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::Layer;

use crate::config::Validated;
use crate::linger::{Linger, LingerListener};
use crate::proxy::{Proxy, UpstreamHeadTooLarge, UpstreamTimeout};
use crate::purge::{PurgeOptions, QuietProgress};
use crate::reload::{self, Current, Resolve};
use crate::store::AnyStore;
use crate::tls::TlsListener;

mod length_problem;

use length_problem::{LengthProblem, LengthProblemListener};

/// Serves the gateway on `listener` (and the admin endpoints on `admin`, if given) until
/// `shutdown` resolves, then drains in-flight requests.
///
/// # Errors
/// When the store cannot be opened or a listener fails.
pub async fn run(
    config: Validated,
    listener: TcpListener,
    admin: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    run_reloading(config, listener, admin, shutdown, None).await
}

/// [`run`], re-reading the configuration with `reload` on `SIGHUP` (see [`crate::reload`]).
///
/// # Errors
/// When the store cannot be opened (the message names it, without credentials) or a
/// listener fails.
pub async fn run_reloading(
    config: Validated,
    listener: TcpListener,
    admin: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    reload: Option<Resolve>,
) -> anyhow::Result<()> {
    let store = Arc::new(AnyStore::open(&config.store, &config.store_options).await?);
    serve(config, store, listener, admin, shutdown, reload).await
}

/// [`run`] with a store opened by the caller.
///
/// # Errors
/// When a listener fails.
pub async fn run_with_store(
    config: Validated,
    store: Arc<AnyStore>,
    listener: TcpListener,
    admin: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    serve(config, store, listener, admin, shutdown, None).await
}

/// The proxy behind the idempotency layer under `config`'s policy and upstream, as a router.
fn gateway_app(layer: &IdempotencyLayer<AnyStore>, config: &Validated) -> Router {
    let layer = layer.with_policy(config.policy.clone());
    let proxy = match &config.tls.upstream {
        Some(tls) => Proxy::with_tls(
            &config.upstream,
            config.upstream_timeout,
            config.max_response_headers,
            tls.clone(),
        ),
        None => Proxy::new(
            &config.upstream,
            config.upstream_timeout,
            config.max_response_headers,
        ),
    };
    let type_base = config.policy.problem_type_base.clone();
    let service = HandleError::new(
        layer.layer(proxy.forwarded_proto(config.tls.listener.is_some())),
        move |e: BoxError| {
            let type_base = type_base.clone();
            async move { upstream_error(&type_base, &e) }
        },
    );
    Router::new().fallback_service(service)
}

async fn serve(
    config: Validated,
    store: Arc<AnyStore>,
    listener: TcpListener,
    admin: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    reload: Option<Resolve>,
) -> anyhow::Result<()> {
    prometheus();
    crate::telemetry::register_gateway(&config.policy, store.backend());
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let layer = IdempotencyLayer::from_arc(store.clone(), config.policy.clone());
    let drain = layer.clone();
    let (app_tx, app_rx) = watch::channel(gateway_app(&layer, &config));
    let app = Router::new().fallback_service(Current::new(app_rx));
    // The longest upstream timeout any configuration had: the drain at shutdown waits that.
    let longest_timeout = Arc::new(std::sync::Mutex::new(config.upstream_timeout));
    if let Some(resolve) = reload {
        let longest = longest_timeout.clone();
        let apply = move |c: &Validated| {
            if let Ok(mut t) = longest.lock() {
                *t = (*t).max(c.upstream_timeout);
            }
            let _ = app_tx.send(gateway_app(&layer, c));
        };
        tokio::spawn(reload::on_sighup(
            resolve,
            config.clone(),
            apply,
            stop_rx.clone(),
        ));
    }

    if let Some(admin) = admin {
        let admin_app = Router::new()
            .route("/healthz", get(|| async { "ok\n" }))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics_text))
            .with_state(store.clone());
        if let Ok(addr) = admin.local_addr() {
            tracing::info!(admin = %addr, "idemgate admin listening");
        }
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
    // A key service purges its own store and exports its own gauges.
    let own_store = !matches!(*store, AnyStore::KeyService(_));
    // The purge stops when its handle drops, at the latest when `serve` returns.
    let purge = config.purge_interval.filter(|_| own_store).map(|every| {
        let store = store.clone();
        let opts = PurgeOptions {
            batch: config.purge_batch,
            max_rate: None,
            dry_run: false,
        };
        PurgeHandle::spawn_with(move |stop| async move {
            let quiet = || Box::new(QuietProgress) as Box<dyn crate::purge::Progress>;
            crate::purge::watch(&*store, opts, every, false, quiet, stop.wait()).await;
        })
    });
    if let Some(every) = config.gauges_interval.filter(|_| own_store) {
        let (store, rx) = (store.clone(), stop_rx.clone());
        tokio::spawn(async move { crate::gauges::refresh(&*store, every, stopped(rx)).await });
    }
    tracing::info!(
        listen = %listener.local_addr()?,
        tls = config.tls.listener.is_some(),
        upstream = %config.upstream,
        store = store.backend(),
        "idemgate gateway listening"
    );
    // Responses go out as soon as they are written: Nagle's algorithm would hold small
    // writes back for the client's delayed ACK. Connections linger on close, so an answer
    // sent before the request body was read (`413`) reaches a client still sending it.
    let listener = LingerListener::new(listener, Linger::default()).tap_io(|tcp| {
        let _ = tcp.get_ref().set_nodelay(true);
    });
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    // hyper's bare `400` to differing `Content-Length` values gets a problem+json body.
    let problem = LengthProblem::new(&config.policy.problem_type_base);
    match &config.tls.listener {
        Some(tls) => {
            // `tap_io` gives the wrapped listeners axum's `ConnectInfo<SocketAddr>`.
            let tls = TlsListener::new(listener, tls.clone());
            let tls = LengthProblemListener::new(tls, problem).tap_io(|_| {});
            axum::serve(tls, app)
                .with_graceful_shutdown(stopped(stop_rx))
                .await?
        }
        None => {
            let listener = LengthProblemListener::new(listener, problem).tap_io(|_| {});
            axum::serve(listener, app)
                .with_graceful_shutdown(stopped(stop_rx))
                .await?
        }
    }
    drop(purge);
    // Operations whose clients left still run; let them finish and record their outcome
    // (bounded by the upstream timeout, plus 5 s for outcome writes that are still being
    // retried), or their retries would get `outcome-unknown`. A write cut off here is logged
    // and counted (`idempotency_outcome_abandoned_total{reason="shutdown"}`).
    let longest = longest_timeout
        .lock()
        .map_or(config.upstream_timeout, |t| *t);
    let grace = longest + Duration::from_secs(5);
    if tokio::time::timeout(grace, drain.drain()).await.is_err() {
        tracing::warn!(
            pending = drain.detached_tasks().len(),
            "shutting down with operations still running"
        );
    }
    Ok(())
}

/// The answer when the upstream could not be used: `502`, or `504` after the timeout.
fn upstream_error(type_base: &str, e: &BoxError) -> Response<BoxBody> {
    tracing::warn!(error = %e, "upstream request failed");
    let rejection = if e.is::<UpstreamTimeout>() {
        IdempotencyRejection::UpstreamTimeout
    } else if e.is::<NotSent>() {
        IdempotencyRejection::UpstreamUnreachable
    } else if e.is::<UpstreamHeadTooLarge>() {
        IdempotencyRejection::UpstreamHeadTooLarge
    } else {
        IdempotencyRejection::UpstreamFailed
    };
    rejection.into_response(type_base)
}

async fn readyz(State(store): State<Arc<AnyStore>>) -> impl IntoResponse {
    match tokio::time::timeout(Duration::from_secs(2), store.ping()).await {
        Ok(Ok(())) => (StatusCode::OK, "ready\n".to_owned()),
        Ok(Err(e)) => {
            // The whole chain: the store's own error says what is wrong (e.g. which file).
            let why = crate::store::describe(&e);
            (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n"))
        }
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "store timed out\n".to_owned(),
        ),
    }
}

/// The Prometheus recorder, installed once per process (see [`crate::telemetry`]).
pub fn prometheus() -> Option<&'static PrometheusHandle> {
    crate::telemetry::prometheus()
}

async fn metrics_text() -> impl IntoResponse {
    match prometheus() {
        Some(h) => (StatusCode::OK, h.render()),
        None => (
            StatusCode::NOT_FOUND,
            "metrics recorder unavailable\n".into(),
        ),
    }
}
