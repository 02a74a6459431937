//! Configuration reload on `SIGHUP`.
//!
//! The signal re-reads the file (with the command-line flags applied again). A file with
//! errors is rejected: every error is logged and the running configuration stays. A good
//! one applies to requests that arrive afterwards: the gateway's service is swapped
//! ([`Current`]), and requests already in flight finish under the service they started
//! with. Settings bound at start-up (listeners, store, purge task, engine-wide store
//! deadline and pending-outcome bounds, listener certificate) are logged as needing a
//! restart and keep their running values.

use std::convert::Infallible;
use std::task::{Context, Poll};

use tokio::sync::watch;
use tower::util::Oneshot;
use tower::{Service, ServiceExt};

use crate::config::Validated;

/// Re-reads the configuration: the file and the flags, validated.
pub type Resolve = Box<dyn Fn() -> anyhow::Result<Validated> + Send + Sync>;

/// A service that forwards each request to the service current when it arrives.
pub struct Current<S> {
    rx: watch::Receiver<S>,
}

impl<S> Current<S> {
    /// Serves with whatever `rx` holds at each request.
    pub fn new(rx: watch::Receiver<S>) -> Self {
        Self { rx }
    }
}

impl<S> Clone for Current<S> {
    fn clone(&self) -> Self {
        Self {
            rx: self.rx.clone(),
        }
    }
}

impl<S> std::fmt::Debug for Current<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Current").finish_non_exhaustive()
    }
}

impl<S, R> Service<R> for Current<S>
where
    S: Service<R, Error = Infallible> + Clone,
{
    type Response = S::Response;
    type Error = Infallible;
    type Future = Oneshot<S, R>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: R) -> Self::Future {
        // Cloned out of the channel: this request keeps this service to the end.
        let service = self.rx.borrow().clone();
        service.oneshot(req)
    }
}

/// The settings that differ between `running` and `new` but only change on a restart, by
/// their field names in the file.
pub fn restart_only(running: &Validated, new: &Validated) -> Vec<&'static str> {
    let mut changed = Vec::new();
    let mut check = |differs: bool, field: &'static str| {
        if differs {
            changed.push(field);
        }
    };
    check(running.listen != new.listen, "listen");
    check(running.admin_listen != new.admin_listen, "admin_listen");
    check(running.store != new.store, "store");
    let opts = |v: &Validated| format!("{:?}", v.store_options);
    check(
        opts(running) != opts(new),
        "store_table/store_key_prefix/store_migrate",
    );
    check(
        running.purge_interval != new.purge_interval,
        "purge_interval",
    );
    check(running.purge_batch != new.purge_batch, "purge_batch");
    check(
        running.policy.lifecycle != new.policy.lifecycle,
        "store_timeout/max_pending_outcomes/max_pending_outcome_bytes",
    );
    check(
        running.tls.files != new.tls.files,
        "tls_cert_file/tls_key_file",
    );
    changed
}

/// Until `stop` turns true, re-reads the configuration on each `SIGHUP` with `resolve` and
/// hands a good one to `apply`; logs what happened either way. `running` is the
/// configuration the process started with. The signal handler is installed when this is
/// called (before the returned future first runs), so a `SIGHUP` sent once the gateway
/// answers never takes the default action (ending the process).
pub fn on_sighup(
    resolve: Resolve,
    running: Validated,
    apply: impl Fn(&Validated) + Send + 'static,
    mut stop: watch::Receiver<bool>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
    async move {
        #[cfg(unix)]
        let mut hup = match hup {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGHUP; configuration reload is off");
                return;
            }
        };
        loop {
            #[cfg(unix)]
            let signal = hup.recv();
            #[cfg(not(unix))]
            let signal = std::future::pending::<Option<()>>();
            tokio::select! {
                _ = signal => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            reload_once(&resolve, &running, &apply);
        }
    }
}

/// One reload: resolve, log, apply.
pub fn reload_once(resolve: &Resolve, running: &Validated, apply: &impl Fn(&Validated)) {
    match resolve() {
        Err(e) => {
            tracing::error!("configuration reload rejected; the running configuration stays: {e:#}")
        }
        Ok(new) => {
            for field in restart_only(running, &new) {
                tracing::warn!(
                    field,
                    "configuration reload: `{field}` changed but only takes effect after a restart; the running value stays"
                );
            }
            apply(&new);
            tracing::info!(
                upstream = %new.upstream,
                routes = new.policy.routes().count(),
                "configuration reloaded; new requests use the new policy"
            );
        }
    }
}
