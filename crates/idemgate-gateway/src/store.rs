//! [`AnyStore`]: the store backend picked at run time from a URL.

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use idemgate_client::{KeyServiceClient, KeyServiceStore};
use idemgate_core::store::Result;
use idemgate_core::{GaugedStore, StoreGauges};
use idemgate_core::{
    IdempotencyRecord, IdempotencyStore, InsertOutcome, InsertRequest, Lease, LeaseToken,
    MemoryStore, Peeked, ScopedKey, StoredResponse, UnixMillis,
};
use idemgate_postgres::PostgresStore;
use idemgate_redis::RedisStore;
use idemgate_sqlite::{SqliteOptions, SqliteStore};

/// A parsed store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// `memory://`: records in process memory, lost on restart.
    Memory,
    /// `sqlite://PATH` (relative, or `sqlite:///abs/path`): the embedded default.
    Sqlite(PathBuf),
    /// `postgres://` or `postgresql://` (libpq-style URL; `sslmode=` selects TLS).
    Postgres(String),
    /// `redis://`, `rediss://` (TLS), `redis+cluster://host:port,host:port` (Redis Cluster).
    Redis(String),
    /// `idemgate://host:port` or `idemgates://host:port` (TLS): a key service, whose
    /// records this gateway shares with every other caller of its namespace.
    KeyService(String),
}

impl StoreUrl {
    /// Parses `memory://` or `sqlite://PATH`.
    ///
    /// # Errors
    /// A message saying which forms are accepted.
    pub fn parse(url: &str) -> std::result::Result<Self, String> {
        let url = url.trim();
        if url == "memory://" || url == "memory:" {
            return Ok(Self::Memory);
        }
        if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err("`sqlite://` needs a file path, e.g. sqlite://./idemgate.db".into());
            }
            return Ok(Self::Sqlite(PathBuf::from(path)));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Self::Postgres(url.to_owned()));
        }
        if [
            "redis://",
            "rediss://",
            "redis+unix://",
            "redis+cluster://",
            "rediss+cluster://",
        ]
        .iter()
        .any(|p| url.starts_with(p))
        {
            return Ok(Self::Redis(url.to_owned()));
        }
        if url.starts_with("idemgate://") || url.starts_with("idemgates://") {
            return Ok(Self::KeyService(url.to_owned()));
        }
        Err(format!(
            "`{url}` is not a supported store URL (sqlite://PATH, postgres://..., redis://..., redis+cluster://..., idemgate://HOST:PORT, or memory://)"
        ))
    }
}

/// One of the store backends, chosen at run time.
#[derive(Debug)]
pub enum AnyStore {
    /// In-memory.
    Memory(MemoryStore),
    /// SQLite file.
    Sqlite(SqliteStore),
    /// PostgreSQL.
    Postgres(PostgresStore),
    /// Redis or Redis Cluster.
    Redis(RedisStore),
    /// A key service (`idemgate://`).
    KeyService(KeyServiceStore),
}

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
}

impl AnyStore {
    /// Opens the store a URL names (creating and migrating a SQLite file as needed).
    ///
    /// # Errors
    /// When the store cannot be opened, with the cause.
    pub async fn open(url: &StoreUrl, opts: &OpenOptions) -> anyhow::Result<Self> {
        Ok(match url {
            StoreUrl::Memory => Self::Memory(MemoryStore::new()),
            StoreUrl::Sqlite(path) if !opts.create && !path.exists() => {
                anyhow::bail!("store: {} does not exist", path.display())
            }
            StoreUrl::Sqlite(path) => Self::Sqlite(
                SqliteStore::open(path, SqliteOptions::default())
                    .with_context(|| format!("cannot open sqlite store {}", path.display()))?,
            ),
            StoreUrl::Postgres(url) => {
                let mut store = PostgresStore::connect(url).await.with_context(|| {
                    format!("cannot connect to the postgres store {}", redact(url))
                })?;
                if let Some(table) = &opts.table {
                    store = store.with_table_name(table).context("store_table")?;
                }
                if opts.migrate {
                    store.migrate().await.with_context(|| {
                        format!("cannot migrate the postgres store {}", redact(url))
                    })?;
                }
                Self::Postgres(store)
            }
            StoreUrl::Redis(url) => {
                let mut store = RedisStore::connect(url).await.with_context(|| {
                    format!("cannot connect to the redis store {}", redact(url))
                })?;
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
                    Err(e) => {
                        tracing::warn!(error = %e, "redis store: cannot check the server's settings")
                    }
                }
                Self::Redis(store)
            }
            StoreUrl::KeyService(url) => Self::KeyService(open_key_service(url, opts)?),
        })
    }
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
            let kept: Vec<&str> = query
                .split('&')
                .filter(|p| {
                    !p.split('=')
                        .next()
                        .unwrap_or("")
                        .to_ascii_lowercase()
                        .contains("pass")
                })
                .collect();
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

/// An error and its sources on one line (`a: b: c`), leaving out a source whose text the
/// line already holds (many errors print their source in their own message, e.g. sqlx's
/// and redis's I/O errors).
pub fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !line.contains(&text) {
            line = format!("{line}: {text}");
        }
        source = s.source();
    }
    line
}

macro_rules! each {
    // A store call awaited on its own heap allocation: a future of this enum holds one
    // pointer instead of the largest backend's state, so the request futures that await
    // it (spawned, boxed and moved on every request) stay small whichever store is used.
    ($self:ident, $s:ident => boxed $e:expr) => {
        match $self {
            AnyStore::Memory($s) => Box::pin($e).await,
            AnyStore::Sqlite($s) => Box::pin($e).await,
            AnyStore::Postgres($s) => Box::pin($e).await,
            AnyStore::Redis($s) => Box::pin($e).await,
            AnyStore::KeyService($s) => Box::pin($e).await,
        }
    };
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            AnyStore::Memory($s) => $e,
            AnyStore::Sqlite($s) => $e,
            AnyStore::Postgres($s) => $e,
            AnyStore::Redis($s) => $e,
            AnyStore::KeyService($s) => $e,
        }
    };
}

impl IdempotencyStore for AnyStore {
    async fn insert_or_get(&self, req: &InsertRequest) -> Result<InsertOutcome> {
        each!(self, s => boxed s.insert_or_get(req))
    }
    async fn take_over(
        &self,
        seen: &IdempotencyRecord,
        token: LeaseToken,
        lease_ttl: Duration,
    ) -> Result<Option<Lease>> {
        each!(self, s => boxed s.take_over(seen, token, lease_ttl))
    }
    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<UnixMillis> {
        each!(self, s => boxed s.renew(lease, ttl))
    }
    async fn complete(&self, lease: &Lease, r: &StoredResponse) -> Result<()> {
        each!(self, s => boxed s.complete(lease, r))
    }
    async fn fail(&self, lease: &Lease) -> Result<()> {
        each!(self, s => boxed s.fail(lease))
    }
    async fn release(&self, lease: &Lease) -> Result<()> {
        each!(self, s => boxed s.release(lease))
    }
    async fn get(&self, key: &ScopedKey) -> Result<Option<IdempotencyRecord>> {
        each!(self, s => boxed s.get(key))
    }
    async fn peek(&self, key: &ScopedKey) -> Result<Peeked> {
        each!(self, s => boxed s.peek(key))
    }
    async fn insert_or_get_unseen(&self, req: &InsertRequest) -> Result<InsertOutcome> {
        each!(self, s => boxed s.insert_or_get_unseen(req))
    }
    async fn purge_expired(&self, batch: NonZeroU32) -> Result<u64> {
        each!(self, s => boxed s.purge_expired(batch))
    }
    async fn ping(&self) -> Result<()> {
        each!(self, s => boxed s.ping())
    }
    fn backend(&self) -> &'static str {
        each!(self, s => s.backend())
    }
}

/// Why a gateway on a key service has no store gauges.
const KEY_SERVICE_GAUGES: &str = "the key service exports its store's gauges on its own /metrics";

impl GaugedStore for AnyStore {
    async fn gauges(&self) -> Result<StoreGauges> {
        match self {
            Self::Memory(s) => s.gauges().await,
            Self::Sqlite(s) => s.gauges().await,
            Self::Postgres(s) => s.gauges().await,
            Self::Redis(s) => s.gauges().await,
            Self::KeyService(_) => Err(idemgate_core::StoreError::Backend(
                KEY_SERVICE_GAUGES.into(),
            )),
        }
    }
    async fn count_expired(&self, limit: NonZeroU32) -> Result<Option<u64>> {
        match self {
            Self::Memory(s) => s.count_expired(limit).await,
            Self::Sqlite(s) => s.count_expired(limit).await,
            Self::Postgres(s) => s.count_expired(limit).await,
            Self::Redis(s) => s.count_expired(limit).await,
            Self::KeyService(_) => Ok(None),
        }
    }
}

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
