//! Configuration reload on `SIGHUP`.
//!
//! The signal re-reads the file (with the command-line flags applied again). A file with
//! errors is rejected: every error is logged and the running configuration stays. A good
//! one applies to requests that arrive afterwards: the gateway's service is swapped
//! ([`Current`]), and requests already in flight finish under the service they started
//! with. Settings bound at start-up (listeners, store, what its writes wait for on replicas,
//! the forward journal, purge task, engine-wide store deadline and pending-outcome bounds,
//! listener certificate, the listeners' timeouts and `max_connections`) are logged as
//! needing a restart and keep their running values.
//!
//! A file that would change what (principal, route) a request gets ([`ScopeSettings`]:
//! the principal sources, `principal_hash_key_file`'s key, `[jwt] issuer`, `header_name`,
//! `methods`, the route templates) is refused, unless it sets
//! `allow_scope_change_on_reload = true`: a retry of a key in flight would look in the new
//! scope, find nothing and run again. It is compared with the configuration applied last.
//!
//! Each reload is counted in `idempotency_config_reloads_total{result}`: `applied`,
//! `refused` (a scope change without the allowance) or `invalid` (the file has errors), so
//! an alert can say that the file and the running configuration differ.

use std::convert::Infallible;
use std::future::Future;
use std::task::{Context, Poll};

use idemgate_postgres::ForwardJournalOptions;
use tokio::sync::watch;
use tower::Service;

use crate::config::{Base, ScopeSettings, Validated};
use crate::store::{OpenOptions, Replication};
use crate::telemetry::count_reload;

/// Re-reads the configuration: the file and the flags, validated.
pub type Resolve = Box<dyn Fn() -> anyhow::Result<Validated> + Send + Sync>;

/// A service that forwards each request to the service current when it arrives: whatever
/// the receiver holds then. Readiness is the current service's: [`Service::poll_ready`]
/// takes a clone of it, and the next [`Service::call`] gives it the request, so a request
/// keeps the service it was readied with to the end, and its future is that service's own.
#[derive(Debug)]
pub struct Current<S> {
    services: watch::Receiver<S>,
    /// The clone readied by `poll_ready`, taken by `call`.
    ready: Option<S>,
}

impl<S> Current<S> {
    /// Forwards to whatever `services` holds when each request arrives.
    pub fn new(services: watch::Receiver<S>) -> Self {
        Self {
            services,
            ready: None,
        }
    }
}

/// A clone follows the same receiver, with nothing readied.
impl<S> Clone for Current<S> {
    fn clone(&self) -> Self {
        Self::new(self.services.clone())
    }
}

impl<S, R> Service<R> for Current<S>
where
    S: Service<R, Error = Infallible> + Clone,
{
    type Response = S::Response;
    type Error = Infallible;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        let Self { services, ready } = self;
        ready
            .get_or_insert_with(|| services.borrow().clone())
            .poll_ready(cx)
    }

    /// Calls the service readied by `poll_ready`; called without it (against tower's
    /// contract), the current service unreadied, which only a service that is always ready
    /// (the gateway's) accepts.
    fn call(&mut self, req: R) -> Self::Future {
        let Self { services, ready } = self;
        let mut service = ready.take().unwrap_or_else(|| services.borrow().clone());
        service.call(req)
    }
}

/// The settings that differ between `running` and `new` but only change on a restart, by
/// their field names in the file.
pub fn restart_only(running: &Validated, new: &Validated) -> Vec<&'static str> {
    let (a, b) = (&running.base, &new.base);
    // The replication and journal keys are named on their own.
    let opts = |base: &Base| {
        let replication = Default::default();
        format!(
            "{:?}",
            OpenOptions {
                replication,
                ..base.store_options.clone()
            }
        )
    };
    let store_options = "store_table/store_key_prefix/store_migrate/store_max_connections";
    let (ra, rb) = (&a.store_options.replication, &b.store_options.replication);
    let lifecycle = "store_timeout/max_pending_outcomes/max_pending_outcome_bytes/max_waiters";
    let journal = journal_changes(ra, rb);
    [
        (running.listen != new.listen, "listen"),
        (running.admin_listen != new.admin_listen, "admin_listen"),
        (a.store != b.store, "store"),
        (opts(a) != opts(b), store_options),
        (
            ra.require_synchronous != rb.require_synchronous,
            "require_synchronous_replication",
        ),
        (
            ra.redis_wait_replicas != rb.redis_wait_replicas,
            "redis_wait_replicas",
        ),
        (
            ra.redis_wait_timeout != rb.redis_wait_timeout,
            "redis_wait_timeout",
        ),
        (journal[0], "forward_journal_file"),
        (journal[1], "forward_journal_window"),
        (journal[2], "failover_grace"),
        (
            a.keyring.as_ref().map(|k| k.ids().collect::<Vec<_>>())
                != b.keyring.as_ref().map(|k| k.ids().collect::<Vec<_>>()),
            "encryption_key_files",
        ),
        (a.purge_interval != b.purge_interval, "purge_interval"),
        (a.purge_batch != b.purge_batch, "purge_batch"),
        (a.policy.lifecycle != b.policy.lifecycle, lifecycle),
        (a.tls.files != b.tls.files, "tls_cert_file/tls_key_file"),
        (
            a.connections != b.connections,
            "header_read_timeout/body_read_timeout/idle_timeout/max_connections",
        ),
    ]
    .into_iter()
    .filter_map(|(differs, field)| differs.then_some(field))
    .collect()
}

/// Whether `forward_journal_file`, `forward_journal_window` and `failover_grace` differ
/// between `a` and `b`; without a journal the durations count as their defaults (they are
/// not used).
fn journal_changes(a: &Replication, b: &Replication) -> [bool; 3] {
    let (ja, jb) = (a.forward_journal.as_ref(), b.forward_journal.as_ref());
    let d = ForwardJournalOptions::new("");
    let window = |j: Option<&ForwardJournalOptions>| j.map_or(d.window, |j| j.window);
    let grace =
        |j: Option<&ForwardJournalOptions>| j.map_or(d.failover_grace, |j| j.failover_grace);
    [
        ja.map(|j| &j.path) != jb.map(|j| &j.path),
        window(ja) != window(jb),
        grace(ja) != grace(jb),
    ]
}

/// Until `stop` completes, re-reads the configuration on each `SIGHUP` with `resolve` and
/// hands a good one to `apply` ([`reload_once`]); logs what happened either way. `running`
/// is the configuration the process started with. The signal handler is installed when this is
/// called (before the returned future first runs), so a `SIGHUP` sent once the gateway
/// answers never takes the default action (ending the process).
pub fn on_sighup(
    resolve: Resolve,
    running: Validated,
    apply: impl Fn(&Validated) + Send + 'static,
    stop: impl Future<Output = ()> + Send + 'static,
) -> impl Future<Output = ()> + Send + 'static {
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
        let mut stop = std::pin::pin!(stop);
        let mut applied = running.base.scope.clone();
        loop {
            #[cfg(unix)]
            let signal = hup.recv();
            #[cfg(not(unix))]
            let signal = std::future::pending::<Option<()>>();
            tokio::select! {
                _ = signal => {}
                _ = &mut stop => return,
            }
            reload_once(&resolve, &running, &mut applied, &apply);
        }
    }
}

/// One reload: resolve, check, log, apply. `running` is the configuration the process
/// started with (settings bound at start-up are compared with it); `applied` is the scope of
/// the configuration applied last, updated when this one applies.
///
/// A configuration that changes the scope ([`ScopeSettings::changes`]) without
/// `allow_scope_change_on_reload` is refused: logged as an error naming what changed, and
/// the running configuration stays. Every outcome is counted
/// ([`crate::telemetry::CONFIG_RELOADS`]).
pub fn reload_once(
    resolve: &Resolve,
    running: &Validated,
    applied: &mut ScopeSettings,
    apply: &impl Fn(&Validated),
) {
    let new = match resolve() {
        Ok(new) => new,
        Err(e) => {
            tracing::error!(
                "configuration reload rejected; the running configuration stays: {e:#}"
            );
            count_reload("invalid");
            return;
        }
    };
    let moved = applied.changes(&new.base.scope);
    if !moved.is_empty() {
        let changed = moved.join("; ");
        if !new.base.allow_scope_change_on_reload {
            tracing::error!(
                %changed,
                "configuration reload refused: it changes what (principal, route) requests get, so retries of keys in flight would run again; the running configuration stays. Restart the gateway while no retries are expected, or set allow_scope_change_on_reload = true"
            );
            count_reload("refused");
            return;
        }
        tracing::warn!(
            %changed,
            "configuration reload changes what (principal, route) requests get (allow_scope_change_on_reload = true): retries of keys in flight may run again"
        );
    }
    for field in restart_only(running, &new) {
        tracing::warn!(
            field,
            "configuration reload: `{field}` changed but only takes effect after a restart; the running value stays"
        );
    }
    apply(&new);
    count_reload("applied");
    *applied = new.base.scope;
    tracing::info!(
        upstream = %new.upstream,
        routes = new.base.policy.routes().count(),
        "configuration reloaded; new requests use the new policy"
    );
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::future::poll_fn;

    use tokio::sync::watch;
    use tower::Service;

    use super::Current;

    /// A service answering its name.
    fn named(
        name: &'static str,
    ) -> impl Service<(), Response = &'static str, Error = Infallible, Future: Send> + Clone {
        tower::service_fn(move |()| async move { Ok::<_, Infallible>(name) })
    }

    #[tokio::test]
    async fn a_request_keeps_the_service_it_was_readied_with() {
        let (tx, rx) = watch::channel(named("first"));
        let mut current = Current::new(rx);
        poll_fn(|cx| current.poll_ready(cx)).await.unwrap();
        let mut other = current.clone();
        tx.send(named("second")).unwrap();
        assert_eq!(current.call(()).await.unwrap(), "first");
        poll_fn(|cx| current.poll_ready(cx)).await.unwrap();
        assert_eq!(current.call(()).await.unwrap(), "second");
        // A clone has nothing readied: it takes the service in force.
        poll_fn(|cx| other.poll_ready(cx)).await.unwrap();
        assert_eq!(other.call(()).await.unwrap(), "second");
    }
}
