//! Connecting the store's pool: the host of the URL's list it uses (`hosts.rs`), the checks
//! every new connection passes before the pool hands it out, and, for a list of hosts, a
//! watcher that follows the primary through a failover.
//!
//! Every new connection runs one query (simple protocol, nothing prepared:
//! `server.rs`): `pg_is_in_recovery()`, the system identifier and the timeline. A standby is
//! refused unless the URL says `target_session_attrs=any`; a system identifier other than the
//! first one the store saw is another database and is refused; a timeline behind the highest
//! one seen is a former primary and is refused; a higher one is a failover (logged, counted
//! in `idempotency_store_failovers_total{backend="postgres"}`), and idle connections opened
//! before it are closed instead of reused. The pool retries a refused connection until its
//! acquire timeout, so store calls fail with `StoreError::Unavailable` meanwhile;
//! [`PostgresStore::last_refusal`] says why.

mod search;
mod server;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemgate_core::report::error_text;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool};
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use self::server::{Seen, ServerFacts};
use crate::error::{PostgresStoreError, Result};
use crate::hosts::SessionAttrs;
use crate::journal::{Gate, Identity, Journal, Primary};
use crate::options::PostgresOptions;
use crate::store::PostgresStore;

/// Idle connections opened less than this after a failover are closed too: their checks may
/// have passed on the former primary just before it was seen.
const RETIRE_MARGIN: Duration = Duration::from_secs(1);

/// One host of the URL: its name for messages (`host:port`) and its connect options.
struct Host {
    name: String,
    options: PgConnectOptions,
}

/// What the pool's hooks, the watcher and the store share.
pub(crate) struct Cluster {
    hosts: Vec<Host>,
    attrs: SessionAttrs,
    options: PostgresOptions,
    /// How long a probe may take to connect and answer.
    connect_timeout: Duration,
    /// The index in `hosts` the pool connects to.
    current: AtomicUsize,
    seen: Mutex<Seen>,
    /// Nanoseconds after `epoch` before which (plus [`RETIRE_MARGIN`]) idle connections are
    /// closed instead of reused; 0 for none.
    retire_before: AtomicU64,
    epoch: Instant,
    /// Wakes the watcher when a new connection was refused.
    wake: Notify,
    /// The forward journal's gate, closed when a failover is seen.
    gate: Option<Arc<Gate>>,
}

/// What a store made by [`connect`] keeps: the shared state, and the watcher it stops when
/// the last clone of the store is dropped.
#[derive(Default)]
pub(crate) struct Link {
    cluster: Option<Arc<Cluster>>,
    watcher: Option<AbortHandle>,
}

impl Drop for Link {
    fn drop(&mut self) {
        if let Some(watcher) = &self.watcher {
            watcher.abort();
        }
    }
}

/// Connects a pool to the host of `url` that passes the checks (the first primary of a list,
/// the highest timeline if several are), waiting up to the pool's acquire timeout for an
/// unreachable one, and starts the watcher of a list of hosts.
///
/// # Errors
/// [`PostgresStoreError::InvalidUrl`] for a host list libpq would not accept, `Sqlx` for an
/// invalid URL or an unreachable host, [`PostgresStoreError::Standby`],
/// [`PostgresStoreError::OtherDatabase`], [`PostgresStoreError::NoServer`] (a list), or why
/// the pool refused its first connection.
///
/// With a forward `journal`, the identity it recorded is the one first seen, and a failover
/// closes its gate.
pub(crate) async fn connect(
    url: &str,
    options: &PostgresOptions,
    journal: Option<&Journal>,
) -> Result<(PgPool, Link)> {
    // Checked as `check_url` checks it, before the driver parses (and would log) anything.
    let list = crate::url::parse(url)?;
    let hosts = list
        .urls
        .iter()
        .map(|url| {
            let options = options.connect_options(url)?;
            let name = format!("{}:{}", options.get_host(), options.get_port());
            Ok(Host { name, options })
        })
        .collect::<Result<Vec<_>>>()?;
    let pool_options = options.pool_options();
    let connect_timeout = pool_options.get_acquire_timeout();
    let cluster = Arc::new(Cluster {
        hosts,
        attrs: list.attrs,
        options: options.clone(),
        connect_timeout,
        current: AtomicUsize::new(0),
        seen: Mutex::new(journal.map_or_else(Seen::default, |j| Seen::recorded(j.recorded))),
        retire_before: AtomicU64::new(0),
        epoch: Instant::now(),
        wake: Notify::new(),
        gate: journal.map(|j| j.gate.clone()),
    });
    let (index, conn) = cluster.find(Instant::now() + connect_timeout).await?;
    cluster.current.store(index, Ordering::SeqCst);
    let watched = match cluster.hosts.len() {
        1 => {
            close(conn).await;
            None
        }
        _ => Some(conn),
    };
    let connect = cluster.hosts[index].options.clone();
    let pool = with_hooks(pool_options, &cluster)
        .connect_with(connect)
        .await
        .map_err(|e| cluster.refusal_or(e))?;
    let watcher = watched.map(|conn| {
        tokio::spawn(search::watch(cluster.clone(), pool.clone(), conn)).abort_handle()
    });
    let cluster = Some(cluster);
    Ok((pool, Link { cluster, watcher }))
}

/// `options` with the checks of every new connection and the retirement of the connections
/// opened before a failover.
fn with_hooks(options: PgPoolOptions, cluster: &Arc<Cluster>) -> PgPoolOptions {
    let (on_connect, on_acquire) = (cluster.clone(), cluster.clone());
    options
        .after_connect(move |conn, _| {
            let cluster = on_connect.clone();
            Box::pin(async move { cluster.admit(conn).await })
        })
        .before_acquire(move |_, meta| {
            let keep = on_acquire.opened_after_failover(meta.age);
            Box::pin(async move { Ok(keep) })
        })
}

/// Closes `conn` politely, ignoring errors (it may be broken).
async fn close(conn: PgConnection) {
    let _ = conn.close().await;
}

impl Cluster {
    fn current_name(&self) -> &str {
        &self.hosts[self.current.load(Ordering::SeqCst)].name
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The pool's `after_connect`: the checks, and the refusal kept for
    /// [`PostgresStore::last_refusal`].
    async fn admit(&self, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        let name = self.current_name();
        let checked = match self.check(conn, name).await {
            Ok(()) => self.session(conn).await,
            Err(e) => Err(e),
        };
        match checked {
            Ok(()) => {
                self.seen().refusal = None;
                Ok(())
            }
            Err(e) => {
                let e = Arc::new(e);
                self.seen().refuse(e.clone());
                self.wake.notify_one();
                Err(sqlx::Error::Configuration(Box::new(e)))
            }
        }
    }

    /// The session checks every pooled connection passes after the server's
    /// (`sync.rs`: synchronous replication, when required).
    async fn session(&self, conn: &mut PgConnection) -> Result<()> {
        crate::sync::check_session(conn, &self.options)
            .await
            .map(drop)
    }

    /// Reads the facts of the server on `conn` (`name`) and accepts them (see
    /// [`Seen::observe`]); a standby is refused unless the URL says `any`.
    async fn check(&self, conn: &mut PgConnection, name: &str) -> Result<()> {
        let facts = self.read_facts(conn).await?;
        self.accepts(name, &facts)?;
        self.observe(name, &facts)
    }

    /// Records `facts` ([`Seen::observe`]); after a failover, idle connections opened
    /// before it are closed instead of reused.
    /// The forward journal's gate is closed before the connection is handed out.
    fn observe(&self, name: &str, facts: &ServerFacts) -> Result<()> {
        if self.seen().observe(name, facts)? {
            if let Some(gate) = &self.gate {
                gate.failover_seen();
            }
            self.retire_idle();
        }
        Ok(())
    }
}

impl Primary for Cluster {
    fn identity(&self) -> Identity {
        let seen = self.seen();
        Identity {
            system_identifier: seen.system_identifier,
            timeline: seen.timeline,
        }
    }

    fn timeline_read(&self, timeline: u32) {
        let facts = ServerFacts {
            in_recovery: false,
            system_identifier: None,
            timeline: Some(timeline),
        };
        if let Err(e) = self.observe(self.current_name(), &facts) {
            tracing::warn!(error = %error_text(&e), "PostgreSQL store: a checked connection reads a timeline it would refuse");
        }
    }
}

/// The view of a store whose connections are not checked ([`PostgresStore::from_pool`]):
/// nothing known, nothing to follow.
pub(crate) struct Unchecked;

impl Primary for Unchecked {
    fn identity(&self) -> Identity {
        Identity::default()
    }

    fn timeline_read(&self, _: u32) {}
}

impl Cluster {
    async fn read_facts(&self, conn: &mut PgConnection) -> Result<ServerFacts> {
        let with_id = !self.seen().id_unreadable;
        match server::read_facts(conn, with_id).await {
            Err(e) if with_id && server::permission_denied(&e) => {
                self.seen().mark_id_unreadable(&e);
                Ok(server::read_facts(conn, false).await?)
            }
            read => Ok(read?),
        }
    }

    /// Whether the store may use the server `name` with `facts`, without recording them.
    fn accepts(&self, name: &str, facts: &ServerFacts) -> Result<()> {
        if facts.in_recovery && self.attrs == SessionAttrs::Primary {
            return Err(PostgresStoreError::Standby { host: name.into() });
        }
        self.seen().judge(name, facts)
    }

    /// Whether an idle connection opened `age` ago may be reused: not if it was opened before
    /// the last failover (or less than [`RETIRE_MARGIN`] after it).
    fn opened_after_failover(&self, age: Duration) -> bool {
        let retire = self.retire_before.load(Ordering::Relaxed);
        let opened = self.epoch.elapsed().saturating_sub(age).as_nanos();
        retire == 0 || opened >= u128::from(retire) + RETIRE_MARGIN.as_nanos()
    }

    /// Marks the idle connections opened until now for closing.
    fn retire_idle(&self) {
        let now = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.retire_before.store(now.max(1), Ordering::Relaxed);
    }

    /// `e`, or the refusal of the pool's last new connection if it timed out on refusals.
    fn refusal_or(&self, e: sqlx::Error) -> PostgresStoreError {
        let refusal = self.seen().refusal.take();
        match (&e, refusal) {
            (sqlx::Error::PoolTimedOut, Some(refusal)) => match Arc::try_unwrap(refusal) {
                Ok(refusal) => refusal,
                Err(shared) => PostgresStoreError::NoServer {
                    tried: format!("{}: {}", self.current_name(), error_text(&*shared)),
                },
            },
            _ => e.into(),
        }
    }

    /// Points the pool's new connections at host `i` and closes idle ones to the former.
    fn switch(&self, i: usize, pool: &PgPool) {
        let was = self.current.swap(i, Ordering::SeqCst);
        if was != i {
            pool.set_connect_options(self.hosts[i].options.clone());
            self.retire_idle();
            let (from, to) = (&self.hosts[was].name, &self.hosts[i].name);
            tracing::warn!(%from, %to, "PostgreSQL store: switched to another host of the URL");
        }
    }
}

impl Link {
    /// The shared state of a store made by [`connect`].
    pub(crate) fn cluster(&self) -> Option<Arc<Cluster>> {
        self.cluster.clone()
    }
}

impl PostgresStore {
    fn cluster(&self) -> Option<&Cluster> {
        self.link.cluster.as_deref()
    }

    /// The highest timeline of the primary the store's connections were checked on: the
    /// first 8 hex digits of its WAL file names (`pg_walfile_name(pg_current_wal_lsn())`),
    /// which a promotion raises. `None` for a store made with
    /// [`PostgresStore::from_pool`], or connected to a standby with
    /// `target_session_attrs=any`.
    pub fn timeline(&self) -> Option<u32> {
        self.cluster()?.seen().timeline
    }

    /// The database's system identifier (`pg_control_system()`, as `pg_controldata` prints
    /// it), the same on a primary and its standbys; every new connection must report the
    /// first one seen. `None` for a store made with [`PostgresStore::from_pool`], or when
    /// the server does not let the user read it (managed services revoke it: that check is
    /// then skipped).
    pub fn system_identifier(&self) -> Option<u64> {
        self.cluster()?.seen().system_identifier
    }

    /// Why the last new connection was refused (a standby, another database, a timeline
    /// behind, or the server failing the checks), until one is accepted. Store calls fail
    /// with [`idemgate_core::StoreError::Unavailable`] meanwhile, once the pool's acquire
    /// timeout passes; this names the reason. `None` for a store made with
    /// [`PostgresStore::from_pool`].
    pub fn last_refusal(&self) -> Option<Arc<PostgresStoreError>> {
        self.cluster()?.seen().refusal.clone()
    }
}
