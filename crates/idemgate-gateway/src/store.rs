//! The gateway's store: the facade's [`AnyStore`], found by the URL's scheme
//! ([`StoreUrl`], parsed by the store crate it names) and opened with the file's store
//! options ([`OpenOptions`]: table, key prefix, migrations, the key service's token, what
//! a write waits for on replicas, PostgreSQL's forward journal).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use idemgate_client::{KeyServiceClient, KeyServiceStore};
use idemgate_postgres::{
    ForwardJournalOptions, PostgresOptions, PostgresStore, PostgresStoreError,
};
use idemgate_redis::{RedisOptions, RedisStore};
use idemgate_sqlite::{SqliteLocation, SqliteStore};

pub use idemgate::{AnyStore, AnyUrl as StoreUrl};

/// How to open a store.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// PostgreSQL table name; `None` keeps the default `idempotency_records`.
    pub table: Option<String>,
    /// Redis key prefix; `None` keeps the default `idemgate:`.
    pub key_prefix: Option<String>,
    /// Run pending migrations while opening (SQLite always does).
    pub migrate: bool,
    /// Create a SQLite file that does not exist yet (off for `purge`, where a missing file
    /// is a typo).
    pub create: bool,
    /// Bearer token for an `idemgate://` store (`store_token_file`, or the environment
    /// variable `IDEMGATE_STORE_TOKEN`).
    pub store_token: Option<String>,
    /// PEM CA certificates trusted for an `idemgates://` store instead of the system's.
    pub store_ca_file: Option<PathBuf>,
    /// Deadline of each call to an `idemgate://` store. Defaults to 2 s (`store_timeout`).
    pub store_timeout: Duration,
    /// PostgreSQL: the most connections of the store's pool (`store_max_connections`).
    pub max_connections: u32,
    /// What a write waits for on the store's replicas, and the forward journal.
    pub replication: Replication,
}

/// What a write waits for on the store's replicas before the store acknowledges it, and what
/// repairs a failover that lost writes: the restart-only keys
/// `require_synchronous_replication` (PostgreSQL), `redis_wait_replicas` and
/// `redis_wait_timeout` (Redis), and `forward_journal_file`, `forward_journal_window` and
/// `failover_grace` (PostgreSQL). The default waits for none and keeps no journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replication {
    /// PostgreSQL: every write waits for a synchronous standby
    /// ([`PostgresOptions::with_require_synchronous_replication`]).
    pub require_synchronous: bool,
    /// Redis: replicas that must acknowledge each write (`WAIT`); 0 for none.
    pub redis_wait_replicas: u32,
    /// Redis: how long a write waits for them (500 ms by default).
    pub redis_wait_timeout: Duration,
    /// PostgreSQL: the forward journal
    /// ([`PostgresOptions::with_forward_journal`]), `None` for none. Only `serve` and
    /// `key-service` set it ([`crate::config::Config::serving_open_options`]): the file is
    /// locked by the process that runs on it, so any other command opening it would fail.
    pub forward_journal: Option<ForwardJournalOptions>,
}

impl Default for Replication {
    fn default() -> Self {
        Self {
            require_synchronous: false,
            redis_wait_replicas: 0,
            redis_wait_timeout: RedisOptions::default().wait_timeout,
            forward_journal: None,
        }
    }
}

/// Opens the store a URL names with `opts` (creating and migrating a SQLite file as
/// needed; a PostgreSQL store's forward journal opened and locked when `opts` has one).
///
/// # Errors
/// When the store cannot be opened, with the cause (the URL without credentials): for a
/// forward journal, also a file that cannot be opened or that another process holds, a
/// journal written against another database or a later timeline, and a journal asked of a
/// store that is not PostgreSQL.
pub async fn open(url: &StoreUrl, opts: &OpenOptions) -> anyhow::Result<AnyStore> {
    if opts.replication.forward_journal.is_some() && !matches!(url, StoreUrl::Postgres(_)) {
        anyhow::bail!("forward_journal_file: PostgreSQL only; the store is not postgres://");
    }
    Ok(match url {
        StoreUrl::Sqlite(SqliteLocation::File(path)) if !opts.create && !path.exists() => {
            anyhow::bail!("store: {} does not exist", path.display())
        }
        StoreUrl::Sqlite(location) => {
            let name = match location {
                SqliteLocation::File(path) => path.display().to_string(),
                _ => ":memory:".into(),
            };
            AnyStore::Sqlite(
                SqliteStore::open_location(location.clone(), Default::default())
                    .with_context(|| format!("cannot open sqlite store {name}"))?,
            )
        }
        StoreUrl::Postgres(url) => {
            let journal = opts.replication.forward_journal.clone();
            let mut options = PostgresOptions::default()
                .with_max_connections(opts.max_connections)
                .with_require_synchronous_replication(opts.replication.require_synchronous)
                .with_forward_journal(journal.clone());
            if let Some(table) = &opts.table {
                // In the options, so the journal's task starts on this table.
                options = options.with_table_name(table);
            }
            let store = match PostgresStore::from_url(url, &options).await {
                Err(e @ PostgresStoreError::InvalidIdentifier { .. }) => {
                    return Err(anyhow::Error::new(e).context("store_table"))
                }
                connected => connected.with_context(|| {
                    format!("cannot connect to the postgres store {}", redact(url))
                })?,
            };
            if opts.migrate {
                store.migrate().await.with_context(|| {
                    format!("cannot migrate the postgres store {}", redact(url))
                })?;
            }
            if let Some(j) = &journal {
                tracing::info!(file = %j.path.display(), window = ?j.window, failover_grace = ?j.failover_grace, "postgres store: forward journal open");
            }
            AnyStore::Postgres(store)
        }
        StoreUrl::Redis(url) => AnyStore::Redis(open_redis(url, opts).await?),
        StoreUrl::KeyService(url) => AnyStore::KeyService(open_key_service(url, opts)?),
        other => AnyStore::connect(other).await?,
    })
}

/// The Redis store, with its key prefix; its risky server settings are logged.
async fn open_redis(url: &str, opts: &OpenOptions) -> anyhow::Result<RedisStore> {
    let r = &opts.replication;
    let options = RedisOptions::default().with_wait(r.redis_wait_replicas, r.redis_wait_timeout);
    let mut store = RedisStore::from_url(url, &options)
        .await
        .with_context(|| format!("cannot connect to the redis store {}", redact(url)))?;
    if let Some(prefix) = &opts.key_prefix {
        store = store.with_key_prefix(prefix).context("store_key_prefix")?;
    }
    // Redis can lose records (eviction, no persistence); say so at start-up.
    match store.check_server().await {
        Ok(warnings) => {
            for w in warnings {
                tracing::warn!(warning = %w, "redis store: a record can be lost, and a retry would then run again");
            }
        }
        Err(e) => tracing::warn!(error = %e, "redis store: cannot check the server's settings"),
    }
    Ok(store)
}

/// The client of an `idemgate://` store: its token, its CA file, `store_timeout`.
fn open_key_service(url: &str, opts: &OpenOptions) -> anyhow::Result<KeyServiceStore> {
    let client = if url.starts_with("idemgates://") {
        let tls = crate::tls::client_config(opts.store_ca_file.as_deref())
            .map_err(|e| anyhow::anyhow!("store_ca_file: {e}"))?;
        KeyServiceClient::with_tls(url, (*tls).clone())
    } else {
        KeyServiceClient::new(url)
    }
    .map_err(|e| anyhow::anyhow!("store: {e}"))?;
    let mut client = client.with_timeout(opts.store_timeout);
    match &opts.store_token {
        Some(token) => client = client.with_token(token.clone()),
        None => tracing::warn!(
            "store: no store_token_file (or IDEMGATE_STORE_TOKEN) for the key service; its calls will get 401"
        ),
    }
    Ok(KeyServiceStore::new(client))
}

/// `url` without credentials, for messages and logs: the password of the user part is
/// removed (`postgres://app:secret@db/x` becomes `postgres://app@db/x`, also for each
/// `user:pass@host` of a cluster list), and so is any query parameter whose name contains
/// `pass` (libpq's `?password=`).
pub fn redact(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let hosts: Vec<String> = authority
        .split(',')
        .map(|part| match part.rsplit_once('@') {
            Some((user, host)) => {
                let user = user.split(':').next().unwrap_or("");
                if user.is_empty() {
                    host.to_owned()
                } else {
                    format!("{user}@{host}")
                }
            }
            None => part.to_owned(),
        })
        .collect();
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let name = |p: &&str| p.split('=').next().unwrap_or("").to_ascii_lowercase();
            let params = query.split('&');
            let kept: Vec<&str> = params.filter(|p| !name(p).contains("pass")).collect();
            if kept.is_empty() {
                path.to_owned()
            } else {
                format!("{path}?{}", kept.join("&"))
            }
        }
        None => tail.to_owned(),
    };
    let prefix = if scheme.is_empty() {
        String::new()
    } else {
        format!("{scheme}://")
    };
    format!("{prefix}{}{tail}", hosts.join(","))
}

pub use idemgate_core::report::error_text as describe;

#[cfg(test)]
mod tests {
    use super::{describe, redact};

    #[derive(Debug, thiserror::Error)]
    enum Inner {
        #[error("connection refused")]
        Refused,
    }

    #[derive(Debug, thiserror::Error)]
    enum Outer {
        #[error("io error: {0}")]
        Prints(#[source] Inner),
        #[error("store unavailable")]
        Silent(#[source] Inner),
    }

    #[test]
    fn describe_names_each_cause_once() {
        assert_eq!(
            describe(&Outer::Prints(Inner::Refused)),
            "io error: connection refused"
        );
        assert_eq!(
            describe(&Outer::Silent(Inner::Refused)),
            "store unavailable: connection refused"
        );
    }

    #[test]
    fn redact_removes_passwords_and_keeps_the_address() {
        for (url, want) in [
            (
                "postgres://app:secret@db.internal:5432/pay?sslmode=require",
                "postgres://app@db.internal:5432/pay?sslmode=require",
            ),
            (
                "postgres://app@db/pay?password=secret&sslmode=verify-full",
                "postgres://app@db/pay?sslmode=verify-full",
            ),
            ("redis://:secret@cache:6379/0", "redis://cache:6379/0"),
            (
                "redis+cluster://u:p1@a:7000,u:p2@b:7001",
                "redis+cluster://u@a:7000,u@b:7001",
            ),
            ("redis://cache:6379", "redis://cache:6379"),
            ("postgres://db/pay?password=x", "postgres://db/pay"),
        ] {
            assert_eq!(redact(url), want, "{url}");
        }
    }
}
