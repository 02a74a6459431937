//! Running the gateway: the proxy behind the idempotency layer, as a [`Service`] of the
//! [`Host`] (admin listener, purge, gauges, shutdown), with its configuration reloaded on
//! `SIGHUP`.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use idemgate_core::IdempotencyStore;
use idemgate_tower::{Idempotency, IdempotencyLayer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::Layer;

use crate::config::Validated;
use crate::host::{Host, Service};
use crate::proxy::Proxy;
use crate::reload::{self, Current, Resolve};
use crate::store::AnyStore;

mod answering;

use answering::Answering;

/// Serves the gateway on `listener` (and the admin endpoints on `admin`, if given) until
/// `shutdown` resolves, then drains in-flight requests.
///
/// # Errors
/// When the store cannot be opened (the message names it, without credentials) or a
/// listener fails.
pub async fn run(
    config: Validated,
    listener: TcpListener,
    admin: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let base = &config.base;
    let store = Arc::new(crate::store::open(&base.store, &base.store_options).await?);
    run_reloading(config, store, listener, admin, shutdown, None).await
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
    run_reloading(config, store, listener, admin, shutdown, None).await
}

/// The gateway's service: the proxy behind the idempotency layer.
type App = Answering<Idempotency<Proxy, AnyStore>>;

/// The proxy behind the idempotency layer under `config`'s policy and upstream. The
/// listener serves it through [`Current`], which takes the one in force for each request.
fn gateway_app(layer: &IdempotencyLayer<AnyStore>, config: &Validated) -> App {
    let layer = layer.with_policy(config.base.policy.clone());
    let proxy = Proxy::new(
        &config.upstream,
        config.upstream_timeout,
        config.max_response_headers,
        config.base.tls.upstream.clone(),
    );
    let https = config.base.tls.listener.is_some();
    Answering::new(
        layer.layer(proxy.forwarded_proto(https)),
        &config.base.policy.problem_type_base,
    )
}

/// [`run_with_store`], re-reading the configuration with `reload` on `SIGHUP` (see
/// [`crate::reload`]).
///
/// # Errors
/// When a listener fails.
pub async fn run_reloading(
    config: Validated,
    store: Arc<AnyStore>,
    listener: TcpListener,
    admin: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    reload: Option<Resolve>,
) -> anyhow::Result<()> {
    let host = Host::start(&config.base, &store, admin, shutdown);
    crate::telemetry::register_gateway(&config.base.policy, store.backend());
    let layer = IdempotencyLayer::from_arc(store.clone(), config.base.policy.clone())
        .with_keyring(config.base.keyring.clone());
    let (app_tx, app_rx) = watch::channel(gateway_app(&layer, &config));
    // The longest upstream timeout any configuration had: the drain at shutdown waits that.
    let longest_timeout = Arc::new(Mutex::new(config.upstream_timeout));
    if let Some(resolve) = reload {
        let (longest, layer) = (longest_timeout.clone(), layer.clone());
        let apply = move |c: &Validated| {
            if let Ok(mut t) = longest.lock() {
                *t = (*t).max(c.upstream_timeout);
            }
            let _ = app_tx.send(gateway_app(&layer, c));
        };
        let stop = host.stopped();
        tokio::spawn(reload::on_sighup(resolve, config.clone(), apply, stop));
    }
    tracing::info!(
        listen = %listener.local_addr()?,
        tls = config.base.tls.listener.is_some(),
        upstream = %config.upstream,
        store = store.backend(),
        "idemgate gateway listening"
    );
    let gateway = Gateway {
        app: app_rx,
        layer,
        longest_timeout,
    };
    host.run(listener, gateway).await
}

/// The gateway as a [`Service`]: the proxy of the configuration in force (replaced on
/// each reload), drained at shutdown.
struct Gateway {
    app: watch::Receiver<App>,
    layer: IdempotencyLayer<AnyStore>,
    longest_timeout: Arc<Mutex<Duration>>,
}

impl Service for Gateway {
    /// Served as it is, without a router: a router's future, held by each request in
    /// flight for as long as its upstream takes, would cost it 1.5 KiB.
    type App = Current<App>;

    fn app(&self) -> Current<App> {
        Current::new(self.app.clone())
    }

    /// Operations whose clients left still run; lets them finish and record their outcome
    /// (bounded by the longest upstream timeout, plus 5 s for outcome writes that are still
    /// being retried), or their retries would get `outcome-unknown`. A write cut off here
    /// is logged and counted (`idempotency_outcome_abandoned_total{reason="shutdown"}`).
    /// 2: each request in flight may hold an upstream connection.
    fn files_per_connection(&self) -> usize {
        2
    }

    /// Duplicates waiting for another request's outcome answer `409` at once: shutdown does
    /// not wait out their `max_wait`, and none of them starts a run.
    fn on_stop(&self) -> impl FnOnce() + Send + 'static {
        let layer = self.layer.clone();
        move || layer.end_waits()
    }

    async fn drain(self) {
        let longest = *self
            .longest_timeout
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let grace = longest + Duration::from_secs(5);
        if tokio::time::timeout(grace, self.layer.drain())
            .await
            .is_err()
        {
            tracing::warn!(
                pending = self.layer.detached_tasks().len(),
                "shutting down with operations still running"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{App, Current};

    /// A request keeps its answer for as long as its upstream takes: with no router, the
    /// answer holds the service's future and a few flags, not the request or a service.
    #[test]
    fn a_request_in_flight_holds_a_small_answer() {
        let size = crate::connections::answer_size::<Current<App>>();
        assert!(size <= 128, "{size} bytes");
        assert!(size < std::mem::size_of::<App>(), "{size} bytes");
    }
}
