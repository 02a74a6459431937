//! Searching the URL's hosts for the one to use: at start-up, and in the watcher of a list
//! of hosts when its host is gone or no longer usable.

use std::sync::Arc;
use std::time::Duration;

use idemgate_core::report::error_text;
use sqlx::{ConnectOptions, PgConnection, PgPool};
use tokio::time::Instant;

use super::server::{self, ServerFacts};
use super::{close, Cluster};
use crate::error::{PostgresStoreError, Result};
use crate::hosts::SessionAttrs;

/// How often the watcher of a list of hosts checks that its host is still the primary.
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// The first and the longest pause between two searches of the primary.
const SEARCH_PAUSE: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(1));

/// Why a probed host was not used.
enum Failure {
    /// Not reachable (yet): connection refused, timed out, or the server starting.
    Unreachable(PostgresStoreError),
    /// The host answered and was refused, or failed otherwise.
    Refused(PostgresStoreError),
}

/// Checks the watched host every [`WATCH_EVERY`] (one query on `conn`, bounded by the
/// connect timeout) or when a new connection was refused; when it is gone, silent or no
/// longer usable, searches the hosts until one is and switches the pool to it.
pub(super) async fn watch(cluster: Arc<Cluster>, pool: PgPool, conn: PgConnection) {
    let mut conn = Some(conn);
    loop {
        tokio::select! {
            () = cluster.wake.notified() => {}
            () = tokio::time::sleep(WATCH_EVERY) => {}
        }
        if let Some(c) = conn.as_mut() {
            let name = cluster.current_name();
            let checked = tokio::time::timeout(cluster.connect_timeout, cluster.check(c, name));
            if matches!(checked.await, Ok(Ok(()))) {
                continue;
            }
        }
        if let Some(c) = conn.take() {
            close(c).await;
        }
        conn = Some(cluster.follow(&pool).await);
    }
}

impl Cluster {
    /// Connects to host `i` and checks it (nothing recorded), within `timeout`.
    async fn probe(
        &self,
        i: usize,
        timeout: Duration,
    ) -> Result<(PgConnection, ServerFacts), Failure> {
        let host = &self.hosts[i];
        let connected = tokio::time::timeout(timeout, host.options.connect()).await;
        let mut conn = match connected {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) if server::is_unreachable(&e) => return Err(Failure::Unreachable(e.into())),
            Ok(Err(e)) => return Err(Failure::Refused(e.into())),
            Err(_) => return Err(Failure::Unreachable(server::timed_out(timeout).into())),
        };
        let read = tokio::time::timeout(timeout, self.read_facts(&mut conn)).await;
        let facts = match read {
            Ok(Ok(facts)) => facts,
            Ok(Err(e)) => return Err(Failure::Refused(e)),
            Err(_) => return Err(Failure::Unreachable(server::timed_out(timeout).into())),
        };
        match self.accepts(&host.name, &facts) {
            Ok(()) => Ok((conn, facts)),
            Err(e) => {
                close(conn).await;
                Err(Failure::Refused(e))
            }
        }
    }

    /// Probes every host in order: the usable one with the highest timeline (the first
    /// usable one with `any`), or why each failed.
    async fn search(
        &self,
        timeout: Duration,
    ) -> Result<(usize, PgConnection, ServerFacts), Vec<(usize, Failure)>> {
        let mut best: Option<(usize, PgConnection, ServerFacts)> = None;
        let mut failed = Vec::new();
        for i in 0..self.hosts.len() {
            match self.probe(i, timeout).await {
                Ok((conn, facts))
                    if best.as_ref().is_none_or(|b| facts.timeline > b.2.timeline) =>
                {
                    if let Some((_, worse, _)) = best.replace((i, conn, facts)) {
                        close(worse).await;
                    }
                    if self.attrs == SessionAttrs::Any {
                        break;
                    }
                }
                Ok((conn, _)) => close(conn).await,
                Err(failure) => failed.push((i, failure)),
            }
        }
        best.ok_or(failed)
    }

    /// The first search at start-up: repeated until `deadline` while a host is unreachable
    /// and none is usable. Records the chosen host's facts.
    pub(super) async fn find(&self, deadline: Instant) -> Result<(usize, PgConnection)> {
        let mut pause = SEARCH_PAUSE.0;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let failed = match self.search(left).await {
                Ok((i, conn, facts)) => {
                    self.observe(&self.hosts[i].name, &facts)?;
                    return Ok((i, conn));
                }
                Err(failed) => failed,
            };
            let waiting = failed
                .iter()
                .any(|(_, f)| matches!(f, Failure::Unreachable(_)));
            if !waiting || Instant::now() + pause >= deadline {
                return Err(self.none_usable(failed));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(SEARCH_PAUSE.1);
        }
    }

    /// The error for a search that found no usable host: the host's own for a single host,
    /// else each host's reason.
    fn none_usable(&self, mut failed: Vec<(usize, Failure)>) -> PostgresStoreError {
        let error = |f: Failure| match f {
            Failure::Unreachable(e) | Failure::Refused(e) => e,
        };
        if self.hosts.len() == 1 {
            if let Some((_, failure)) = failed.pop() {
                return error(failure);
            }
        }
        let tried: Vec<String> = failed
            .into_iter()
            .map(|(i, f)| format!("{}: {}", self.hosts[i].name, error_text(&error(f))))
            .collect();
        PostgresStoreError::NoServer {
            tried: tried.join("; "),
        }
    }

    /// Searches the hosts until one is usable, switches the pool to it and returns a
    /// connection to it for the watcher.
    async fn follow(&self, pool: &PgPool) -> PgConnection {
        let lost = self.current_name();
        tracing::warn!(host = %lost, hosts = self.hosts.len(), "PostgreSQL store: lost the primary, searching the URL's hosts");
        let mut pause = SEARCH_PAUSE.0;
        loop {
            match self.search(self.connect_timeout).await {
                Ok((i, conn, facts)) => match self.observe(&self.hosts[i].name, &facts) {
                    Ok(()) => {
                        self.switch(i, pool);
                        return conn;
                    }
                    Err(e) => {
                        tracing::warn!(error = %error_text(&e), "PostgreSQL store: host refused")
                    }
                },
                Err(failed) => {
                    let why = error_text(&self.none_usable(failed));
                    tracing::debug!(error = %why, "PostgreSQL store: no usable host yet");
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(SEARCH_PAUSE.1);
        }
    }
}
