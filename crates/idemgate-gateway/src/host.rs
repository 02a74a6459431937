//! One host for `idemgate serve` and `idemgate key-service`, in the shape of pingora's
//! `Server`: the [`Host`] owns what every service shares (the admin listener with
//! `/healthz`, `/readyz` and `/metrics`, the shutdown watch, the in-process purge, the
//! store gauges and what the store can lose, [`crate::durability`], the listeners'
//! connection limits, [`crate::connections`]); a [`Service`] (the gateway's proxy, the key
//! service's API) answers on its listener until shutdown, then drains.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::extract::State;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::serve::Listener;
use axum::Router;
use http::StatusCode;
use idemgate_core::{IdempotencyStore, PurgeHandle};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::Base;
use crate::connections::{App, Counting, Limits, Listening, ADMIN, SERVICE};
use crate::durability::DurabilityState;
use crate::linger::{Linger, LingerListener};
use crate::purge::{PurgeOptions, QuietProgress};
use crate::store::AnyStore;
use crate::tls::TlsListener;

mod length_problem;

use length_problem::{LengthProblem, LengthProblemIo};

/// A service a [`Host`] runs on its listener: the gateway's proxy or the key service's API.
pub trait Service: Send {
    /// What answers the service's requests (see [`App`]).
    type App: App;

    /// The service's requests' answerer, cloned for each connection.
    fn app(&self) -> Self::App;

    /// Runs once the listener has closed at shutdown and its connections are done (the
    /// gateway lets operations whose clients left record their outcome). Default: nothing.
    fn drain(self) -> impl Future<Output = ()> + Send
    where
        Self: Sized,
    {
        async {}
    }

    /// Files each client connection may hold open: 1, or 2 for a service that opens an
    /// upstream connection per request in flight (the gateway). The start-up check of the
    /// open-file limit reads it ([`crate::connections::check_file_limit`]).
    fn files_per_connection(&self) -> usize {
        1
    }

    /// What to do the moment shutdown begins, before the connections finish their requests
    /// (the gateway ends its duplicates' waits: they answer `409` at once). Default: nothing.
    fn on_stop(&self) -> impl FnOnce() + Send + 'static {
        || {}
    }
}

/// A router alone: answers until shutdown, nothing to drain.
impl Service for Router {
    type App = Self;

    fn app(&self) -> Self {
        self.clone()
    }
}

/// The start of a serving command: installs `base`'s log hash secret, binds the service's
/// listener (`listen`: its configuration key and address) and the admin listener, if
/// enabled (both with a backlog of [`crate::connections::LISTEN_BACKLOG`]), and opens the
/// store.
///
/// # Errors
/// An address that cannot be bound, named with its configuration key; a store that cannot
/// be opened.
pub async fn prepare(
    base: &Base,
    listen: (&str, SocketAddr),
    admin: (&str, Option<SocketAddr>),
) -> anyhow::Result<(TcpListener, Option<TcpListener>, Arc<AnyStore>)> {
    fn one((key, addr): (&str, SocketAddr)) -> anyhow::Result<TcpListener> {
        let bound = crate::connections::bind(addr);
        bound.with_context(|| format!("{key}: cannot bind {addr}"))
    }
    if let Some(secret) = &base.log_hash_key {
        idemgate_core::loghash::set_secret(secret.as_bytes())
            .map_err(|e| anyhow::anyhow!("log_hash_key: {e}"))?;
    }
    let listener = one(listen)?;
    let admin = match admin {
        (key, Some(addr)) => Some(one((key, addr))?),
        (_, None) => None,
    };
    let store = crate::store::open(&base.store, &base.store_options).await?;
    Ok((listener, admin, Arc::new(store)))
}

/// The shared parts of a serving process, running from [`Host::start`] until
/// [`Host::run`] returns.
#[derive(Debug)]
pub struct Host {
    /// The listener's TLS, from `tls_cert_file`/`tls_key_file`.
    tls: Option<Arc<rustls::ServerConfig>>,
    /// The answer to differing `Content-Length` values.
    problem: LengthProblem,
    /// The listeners' timeouts and `max_connections`.
    limits: Limits,
    /// The base of problem `type`s (the `408` answers').
    type_base: String,
    stop: watch::Receiver<bool>,
    /// Stops the purge when dropped.
    purge: Option<PurgeHandle>,
}

impl Host {
    /// Installs the metrics recorder, watches `shutdown`, serves the admin endpoints on
    /// `admin` (if given) and starts the purge (`purge_interval`) and the store gauges
    /// (`gauges_interval`) on `store`: neither runs on a key-service store, which purges and
    /// exports its own. Reads what the store can lose at once and then with the gauges
    /// (`Host::watch_durability`). With a forward journal, its counters start at 0.
    pub fn start(
        config: &Base,
        store: &Arc<AnyStore>,
        admin: Option<TcpListener>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Self {
        crate::telemetry::prometheus();
        if config.store_options.replication.forward_journal.is_some() {
            crate::telemetry::register_forward_journal();
        }
        let (stop_tx, stop) = watch::channel(false);
        tokio::spawn(async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        });
        let host = Self {
            tls: config.tls.listener.clone(),
            problem: LengthProblem::new(&config.policy.problem_type_base),
            limits: config.connections,
            type_base: config.policy.problem_type_base.clone(),
            stop,
            purge: None,
        };
        let own_store = !matches!(**store, AnyStore::KeyService(_));
        let durability = host.watch_durability(store, config.gauges_interval, own_store);
        if let Some(admin) = admin {
            host.serve_admin(admin, store.clone(), durability);
        }
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
            let (store, stopped) = (store.clone(), host.stopped());
            tokio::spawn(async move { crate::gauges::refresh(&*store, every, stopped).await });
        }
        Self { purge, ..host }
    }

    /// Resolves once shutdown began.
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.stop.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    }

    /// Reads what `store` can lose at once, logs it, and re-reads it every `gauges` (every
    /// [`crate::durability::EVERY_WITHOUT_GAUGES`] when the gauges are off), exporting it
    /// when the store is the process's own (`own`); a key service's store is read once, its
    /// service reports its own. Returns the state `/readyz` reads.
    fn watch_durability(
        &self,
        store: &Arc<AnyStore>,
        gauges: Option<Duration>,
        own: bool,
    ) -> Arc<DurabilityState> {
        let state = Arc::new(DurabilityState::default());
        let every = own.then(|| gauges.unwrap_or(crate::durability::EVERY_WITHOUT_GAUGES));
        let (store, kept, stopped) = (store.clone(), state.clone(), self.stopped());
        tokio::spawn(async move {
            crate::durability::watch(&*store, every, own, &kept, stopped).await;
        });
        state
    }

    fn serve_admin(&self, admin: TcpListener, store: Arc<AnyStore>, dur: Arc<DurabilityState>) {
        let app = Router::new()
            .route("/healthz", get(|| async { "ok\n" }))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics_text))
            .with_state(Ready { store, dur });
        if let Ok(addr) = admin.local_addr() {
            tracing::info!(admin = %addr, "idemgate admin listening");
        }
        let limits = self.limits.admin();
        let conf = Listening::new(ADMIN, limits, &self.type_base);
        let admin = Counting::new(admin, ADMIN, limits.max_connections);
        let stopped = self.stopped();
        tokio::spawn(crate::connections::serve(admin, app, conf, stopped));
    }

    /// Serves `service` on `listener` (TLS with `tls_cert_file`) until shutdown, then stops
    /// the purge and runs [`Service::drain`]. At start, warns when the open-file limit is
    /// below what `max_connections` needs ([`crate::connections::check_file_limit`]).
    ///
    /// At most `max_connections` connections are open, each within the listener's timeouts
    /// ([`crate::connections`]). Responses go out as soon as they are written (no Nagle
    /// delay); connections linger on close, so an answer sent before the request body was
    /// read (`413`) reaches a client still sending it; hyper's bare `400` to differing
    /// `Content-Length` values gets a problem+json body.
    ///
    /// # Errors
    /// None today: a failed accept is logged and retried.
    pub async fn run(self, listener: TcpListener, service: impl Service) -> anyhow::Result<()> {
        let max = self.limits.max_connections;
        crate::connections::check_file_limit(max, service.files_per_connection());
        let (stop, on_stop) = (self.stopped(), service.on_stop());
        tokio::spawn(async move {
            stop.await;
            on_stop();
        });
        let counted = Counting::new(listener, SERVICE, max);
        let listener = LingerListener::new(counted, Linger::default());
        let conf = Listening::new(SERVICE, self.limits, &self.type_base);
        let (app, stopped, problem) = (service.app(), self.stopped(), &self.problem);
        match &self.tls {
            Some(tls) => {
                let tls = TlsListener::new(listener, tls.clone());
                let listener = Wrapped::length_problem(tls, problem);
                crate::connections::serve(listener, app, conf, stopped).await
            }
            None => {
                let listener = Wrapped::length_problem(listener, problem);
                crate::connections::serve(listener, app, conf, stopped).await
            }
        }
        drop(self.purge);
        service.drain().await;
        Ok(())
    }
}

/// A listener whose connections are wrapped (by the function) as they are accepted.
struct Wrapped<L, F>(L, F);

impl<L: Listener> Wrapped<L, ()> {
    /// `listener`, its connections answering differing `Content-Length` values with
    /// `problem`.
    fn length_problem(
        listener: L,
        problem: &LengthProblem,
    ) -> Wrapped<L, impl FnMut(L::Io) -> LengthProblemIo<L::Io> + Send + 'static> {
        let problem = problem.clone();
        Wrapped(listener, move |io| {
            LengthProblemIo::new(io, problem.clone())
        })
    }
}

impl<L, F, Io> Listener for Wrapped<L, F>
where
    L: Listener,
    F: FnMut(L::Io) -> Io + Send + 'static,
    Io: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Io = Io;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Io, L::Addr) {
        let (io, addr) = self.0.accept().await;
        ((self.1)(io), addr)
    }

    fn local_addr(&self) -> std::io::Result<L::Addr> {
        self.0.local_addr()
    }
}

/// What `/readyz` reads: the store, and why it refuses new keys, if it does.
#[derive(Clone)]
struct Ready {
    store: Arc<AnyStore>,
    dur: Arc<DurabilityState>,
}

/// `200 ready` when the store answers and takes new keys; `503` with the reason otherwise.
async fn readyz(State(Ready { store, dur }): State<Ready>) -> impl IntoResponse {
    match tokio::time::timeout(Duration::from_secs(2), store.ping()).await {
        Ok(Ok(())) => match dur.refusing_new_keys() {
            None => (StatusCode::OK, "ready\n".to_owned()),
            Some(why) => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("new keys are refused (replays are still served): {why}\n"),
            ),
        },
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

async fn metrics_text() -> impl IntoResponse {
    crate::logging::export_dropped();
    match crate::telemetry::prometheus() {
        Some(h) => (StatusCode::OK, h.render()),
        None => (
            StatusCode::NOT_FOUND,
            "metrics recorder unavailable\n".into(),
        ),
    }
}
