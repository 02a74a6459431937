//! The store and engine sections of a [`Config`]: the store URL, opening options, the
//! `idemgate://` token and what writes wait for on replicas; the lifecycle's deadlines and
//! bounds, the purge and the gauges.

use std::num::NonZeroU32;
use std::time::Duration;

use idemgate_core::LifecycleConfig;

use super::parse::duration;
use super::Config;
use crate::store::{OpenOptions, Replication, StoreUrl};

/// The engine section's values; an invalid one is `None` (and reported).
pub(super) struct Engine {
    pub(super) lifecycle: LifecycleConfig,
    pub(super) purge_interval: Option<Duration>,
    pub(super) purge_batch: Option<NonZeroU32>,
    /// `None` when disabled (`"0s"`) or invalid.
    pub(super) gauges_interval: Option<Duration>,
}

/// The most connections `store_max_connections` may ask for: more backends than one
/// PostgreSQL server serves well (its own default `max_connections` is 100).
pub(super) const MAX_STORE_CONNECTIONS: u32 = 1000;

/// The most replicas `redis_wait_replicas` may ask for: more than any Redis deployment runs
/// (a primary with fewer connected replicas refuses every new key).
pub(super) const MAX_WAIT_REPLICAS: u32 = 16;

impl Config {
    /// The store section: `store` (parsed by its store crate) and `store_token_file`.
    pub(super) fn store_section(&self, errs: &mut Vec<String>) -> Option<StoreUrl> {
        self.check_store_token_file(errs);
        match StoreUrl::parse(&self.store) {
            // A gateway's records must outlive it: a retry after a restart would run again.
            Ok(StoreUrl::Sqlite(idemgate_sqlite::SqliteLocation::Memory)) => {
                errs.push(
                    "store: an in-memory SQLite database loses every record when the process \
                     stops; give a file (sqlite://PATH), or memory:// for tests"
                        .into(),
                );
                None
            }
            Ok(url) => Some(url),
            Err(e) => {
                errs.push(format!("store: {e}"));
                None
            }
        }
    }

    /// `store_max_connections`: from 1 to [`MAX_STORE_CONNECTIONS`], and refused (unless
    /// left at its default) on any store but PostgreSQL, whose pool it sizes. `store` is
    /// `None` when invalid (reported already).
    pub(super) fn pool_section(&self, store: Option<&StoreUrl>, errs: &mut Vec<String>) {
        let n = self.store_max_connections;
        if !(1..=MAX_STORE_CONNECTIONS).contains(&n) {
            errs.push(format!(
                "store_max_connections: must be from 1 to {MAX_STORE_CONNECTIONS}, not {n}"
            ));
        }
        let default = Config::default().store_max_connections;
        if n != default && store.is_some_and(|s| !matches!(s, StoreUrl::Postgres(_))) {
            errs.push(format!(
                "store_max_connections: PostgreSQL only (it sizes its connection pool); the store is {}:",
                self.store_scheme()
            ));
        }
    }

    /// The engine section: the lifecycle's bounds, the purge and the gauges.
    pub(super) fn engine_section(&self, errs: &mut Vec<String>) -> Engine {
        let lifecycle = self.lifecycle(errs);
        let purge_interval = duration("purge_interval", &self.purge_interval, errs);
        let purge_batch = NonZeroU32::new(self.purge_batch);
        if purge_batch.is_none() {
            errs.push("purge_batch: must be at least 1".into());
        }
        let gauges_interval =
            duration("gauges_interval", &self.gauges_interval, errs).filter(|d| !d.is_zero());
        Engine {
            lifecycle,
            purge_interval,
            purge_batch,
            gauges_interval,
        }
    }

    /// The store's opening options, without the forward journal: only `serve` and
    /// `key-service` open it ([`Config::serving_open_options`]).
    pub fn open_options(&self) -> OpenOptions {
        OpenOptions {
            table: (!self.store_table.is_empty()).then(|| self.store_table.clone()),
            key_prefix: (!self.store_key_prefix.is_empty()).then(|| self.store_key_prefix.clone()),
            create: true,
            migrate: self.store_migrate,
            store_token: self.store_token(),
            store_ca_file: (!self.store_ca_file.trim().is_empty())
                .then(|| self.store_ca_file.trim().into()),
            store_timeout: humantime::parse_duration(&self.store_timeout)
                .unwrap_or(LifecycleConfig::default().store_timeout),
            max_connections: self.store_max_connections,
            replication: self.replication(),
        }
    }

    /// `require_synchronous_replication`, `redis_wait_replicas` and `redis_wait_timeout` (an
    /// invalid timeout keeps the default: [`Config::replication_section`] reports it).
    fn replication(&self) -> Replication {
        let d = Replication::default();
        Replication {
            require_synchronous: self.require_synchronous_replication,
            redis_wait_replicas: self.redis_wait_replicas,
            redis_wait_timeout: humantime::parse_duration(&self.redis_wait_timeout)
                .unwrap_or(d.redis_wait_timeout),
            forward_journal: None,
        }
    }

    /// The store URL's scheme, lower case, for messages (the rest may hold a password).
    pub(super) fn store_scheme(&self) -> String {
        let scheme = self.store.trim().split(':').next().unwrap_or("");
        scheme.to_ascii_lowercase()
    }

    /// The replication keys, each refused on a store it does not apply to (naming the key),
    /// `redis_wait_replicas` above [`MAX_WAIT_REPLICAS`] too:
    /// `require_synchronous_replication` on any store but PostgreSQL, `redis_wait_replicas`
    /// and `redis_wait_timeout` (when not their defaults) on any but Redis, and on a Redis
    /// Cluster. With replicas to wait for, `redis_wait_timeout` must be at least 1 ms (`WAIT`
    /// takes 0 as "forever") and below `store_timeout`. `store` is `None` when invalid
    /// (reported already).
    pub(super) fn replication_section(
        &self,
        store: Option<&StoreUrl>,
        store_timeout: Duration,
        errs: &mut Vec<String>,
    ) {
        let Some(store) = store else { return };
        let scheme = self.store_scheme();
        let is_redis = matches!(store, StoreUrl::Redis(_));
        if self.require_synchronous_replication && !matches!(store, StoreUrl::Postgres(_)) {
            errs.push(format!(
                "require_synchronous_replication: PostgreSQL only (it waits for synchronous standbys); the store is {scheme}:"
            ));
        }
        let timeout = duration("redis_wait_timeout", &self.redis_wait_timeout, errs);
        let default_timeout = Replication::default().redis_wait_timeout;
        let set = [
            ("redis_wait_replicas", self.redis_wait_replicas != 0),
            (
                "redis_wait_timeout",
                timeout.is_some_and(|t| t != default_timeout),
            ),
        ];
        for (key, _) in set.iter().filter(|(_, set)| *set) {
            if !is_redis {
                errs.push(format!(
                    "{key}: Redis only (it waits for Redis replicas); the store is {scheme}:"
                ));
            } else if scheme.ends_with("+cluster") {
                errs.push(format!(
                    "{key}: not on a Redis Cluster ({scheme}:): use one primary with replicas (redis:// or redis+sentinel://)"
                ));
            }
        }
        if self.redis_wait_replicas > MAX_WAIT_REPLICAS {
            errs.push(format!(
                "redis_wait_replicas: at most {MAX_WAIT_REPLICAS} (a primary with fewer replicas refuses every new key)"
            ));
        }
        match timeout {
            Some(t) if is_redis && self.redis_wait_replicas > 0 && t < Duration::from_millis(1) => errs.push(
                "redis_wait_timeout: must be at least 1ms (Redis WAIT takes 0 as forever)".into(),
            ),
            Some(t) if is_redis && self.redis_wait_replicas > 0 && t >= store_timeout => {
                errs.push(format!(
                    "redis_wait_timeout: must be below store_timeout ({}), or every waiting write would time out first",
                    humantime::format_duration(store_timeout)
                ))
            }
            _ => {}
        }
    }

    /// Reports a `store_token_file` that cannot be read or is empty (unless
    /// `IDEMGATE_STORE_TOKEN` overrides it).
    fn check_store_token_file(&self, errs: &mut Vec<String>) {
        let path = self.store_token_file.trim();
        if path.is_empty() || std::env::var_os("IDEMGATE_STORE_TOKEN").is_some() {
            return;
        }
        match std::fs::read_to_string(path) {
            Ok(t) if t.trim().is_empty() => errs.push(format!("store_token_file: {path} is empty")),
            Ok(_) => {}
            Err(e) => errs.push(format!("store_token_file: cannot read {path}: {e}")),
        }
    }

    /// The `idemgate://` store's token: `IDEMGATE_STORE_TOKEN`, else `store_token_file`'s
    /// content (unreadable: `None`, and [`Config::validate`] reports it).
    pub(super) fn store_token(&self) -> Option<String> {
        if let Ok(t) = std::env::var("IDEMGATE_STORE_TOKEN") {
            return Some(t.trim().to_owned()).filter(|t| !t.is_empty());
        }
        let path = self.store_token_file.trim();
        if path.is_empty() {
            return None;
        }
        std::fs::read_to_string(path)
            .ok()
            .map(|t| t.trim_end_matches(['\n', '\r']).to_owned())
            .filter(|t| !t.is_empty())
    }

    /// The engine-wide settings: store deadline, pending-outcome and waiter bounds.
    fn lifecycle(&self, errs: &mut Vec<String>) -> LifecycleConfig {
        let d = LifecycleConfig::default();
        let store_timeout = duration("store_timeout", &self.store_timeout, errs);
        if store_timeout.is_some_and(|t| t < Duration::from_millis(10)) {
            errs.push("store_timeout: must be at least 10ms".into());
        }
        if self.max_pending_outcomes == 0 {
            errs.push("max_pending_outcomes: must be at least 1".into());
        }
        if self.max_pending_outcome_bytes == 0 {
            errs.push("max_pending_outcome_bytes: must be at least 1".into());
        }
        if !(1..=1_000_000).contains(&self.max_waiters) {
            errs.push("max_waiters: must be from 1 to 1000000".into());
        }
        LifecycleConfig {
            store_timeout: store_timeout.unwrap_or(d.store_timeout),
            max_pending_outcomes: self.max_pending_outcomes,
            max_pending_outcome_bytes: self.max_pending_outcome_bytes,
            max_waiters: self.max_waiters,
        }
    }
}
