//! [`AnyStore`]: the store a URL names, found by its scheme at run time, as sqlx's
//! `AnyPool` finds a driver. Each store crate parses its own URL; this module only routes
//! the URL to the crate its scheme names, among those the build's features include.
//!
//! ```
//! use idemgate::{AnyStore, IdempotencyStore};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), idemgate::AnyStoreError> {
//! let store = AnyStore::from_url("memory://").await?;
//! assert_eq!(store.backend(), "memory");
//! assert!(AnyStore::from_url("mysql://db/app").await.is_err());
//! # Ok(())
//! # }
//! ```

use std::num::NonZeroU32;
use std::time::Duration;

use idemgate_core::admin::{AdminStore, KeyFilter, Listing};
use idemgate_core::events::{EventSink, KeyEvent};
use idemgate_core::store::{OutcomeWrite, Result};
use idemgate_core::{
    Durability, GaugedStore, IdempotencyRecord, IdempotencyStore, InsertOutcome, InsertRequest,
    Lease, LeaseToken, MemoryStore, Peeked, RawRecord, ScopedKey, StoreCount, StoredResponse,
    UnixMillis,
};

/// One of the stores this build includes, chosen at run time ([`AnyStore::from_url`]).
/// Store calls are delegated to it, each awaited on its own heap allocation, so a future of
/// this type holds one pointer instead of the largest backend's state.
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyStore {
    /// `memory://`: records in process memory, lost on restart.
    Memory(MemoryStore),
    /// `sqlite://PATH` or `sqlite::memory:`.
    #[cfg(feature = "sqlite")]
    Sqlite(idemgate_sqlite::SqliteStore),
    /// `postgres://` or `postgresql://`.
    #[cfg(feature = "postgres")]
    Postgres(idemgate_postgres::PostgresStore),
    /// `redis://`, `rediss://`, `redis+unix://`, `redis+cluster://`, `rediss+cluster://`,
    /// `redis+sentinel://`.
    #[cfg(feature = "redis")]
    Redis(idemgate_redis::RedisStore),
    /// `idemgate://host:port` or `idemgates://host:port`: a key service.
    #[cfg(feature = "client")]
    KeyService(idemgate_client::KeyServiceStore),
}

/// Why [`AnyStore::from_url`] failed: the scheme, or the store crate's own error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AnyStoreError {
    /// No store of this build takes the URL's scheme (the URL is not repeated: it may hold
    /// a password).
    #[error("`{scheme}` is not a store URL scheme of this build (it knows {known})")]
    UnknownScheme {
        /// The URL's scheme (the text before `:`).
        scheme: String,
        /// The schemes this build's features accept.
        known: String,
    },
    /// The text has no `scheme:` (it is not repeated: a secret may have been pasted).
    #[error("the store URL has no scheme (this build knows {known})")]
    NoScheme {
        /// The schemes this build's features accept.
        known: String,
    },
    /// `memory://` with something after it.
    #[error("memory:// takes nothing after the scheme")]
    Memory,
    /// The SQLite store's error.
    #[cfg(feature = "sqlite")]
    #[error(transparent)]
    Sqlite(#[from] idemgate_sqlite::SqliteStoreError),
    /// The PostgreSQL store's error.
    #[cfg(feature = "postgres")]
    #[error(transparent)]
    Postgres(#[from] idemgate_postgres::PostgresStoreError),
    /// The Redis store's error.
    #[cfg(feature = "redis")]
    #[error(transparent)]
    Redis(#[from] idemgate_redis::RedisStoreError),
    /// The key-service client's error.
    #[cfg(feature = "client")]
    #[error(transparent)]
    KeyService(#[from] idemgate_client::ClientError),
}

/// The schemes of this build, for [`AnyStoreError::UnknownScheme`].
fn known() -> String {
    [
        (true, "memory://"),
        (cfg!(feature = "sqlite"), "sqlite://PATH"),
        (cfg!(feature = "postgres"), "postgres://"),
        (
            cfg!(feature = "redis"),
            "redis://, rediss://, redis+unix://, redis+cluster://, redis+sentinel://",
        ),
        (cfg!(feature = "client"), "idemgate://, idemgates://"),
    ]
    .iter()
    .filter_map(|(on, scheme)| on.then_some(*scheme))
    .collect::<Vec<_>>()
    .join(", ")
}

/// A store URL, checked by the store crate its scheme names (`SqliteLocation::parse`,
/// `PostgresStore::check_url`, `RedisStore::check_url`, `KeyServiceClient::check_url`),
/// not connected yet. [`AnyStore::connect`] opens it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AnyUrl {
    /// `memory://`.
    Memory,
    /// `sqlite://PATH`, `sqlite:PATH` or `sqlite::memory:`.
    #[cfg(feature = "sqlite")]
    Sqlite(idemgate_sqlite::SqliteLocation),
    /// `postgres://...` or `postgresql://...`, as given.
    #[cfg(feature = "postgres")]
    Postgres(String),
    /// `redis://`, `rediss://`, `redis+unix://`, `redis+cluster://`, `rediss+cluster://` or
    /// `redis+sentinel://` URL, as given.
    #[cfg(feature = "redis")]
    Redis(String),
    /// `idemgate://host:port` or `idemgates://host:port`, as given.
    #[cfg(feature = "client")]
    KeyService(String),
}

impl AnyUrl {
    /// Finds the store crate by the URL's scheme and lets it check the rest.
    ///
    /// # Errors
    /// [`AnyStoreError::UnknownScheme`], or the store crate's error naming what is wrong.
    pub fn parse(url: &str) -> Result<Self, AnyStoreError> {
        let url = url.trim();
        let Some((scheme, _)) = url.split_once(':') else {
            return Err(AnyStoreError::NoScheme { known: known() });
        };
        Ok(match scheme.to_ascii_lowercase().as_str() {
            "memory" if matches!(url, "memory://" | "memory:") => Self::Memory,
            "memory" => return Err(AnyStoreError::Memory),
            #[cfg(feature = "sqlite")]
            "sqlite" => Self::Sqlite(idemgate_sqlite::SqliteLocation::parse(url)?),
            #[cfg(feature = "postgres")]
            "postgres" | "postgresql" => {
                idemgate_postgres::PostgresStore::check_url(url)?;
                Self::Postgres(url.to_owned())
            }
            #[cfg(feature = "redis")]
            "redis" | "rediss" | "redis+unix" | "redis+cluster" | "rediss+cluster"
            | "redis+sentinel" => {
                idemgate_redis::RedisStore::check_url(url)?;
                Self::Redis(url.to_owned())
            }
            #[cfg(feature = "client")]
            "idemgate" | "idemgates" => {
                idemgate_client::KeyServiceClient::check_url(url)?;
                Self::KeyService(url.to_owned())
            }
            _ => {
                return Err(AnyStoreError::UnknownScheme {
                    scheme: scheme.to_owned(),
                    known: known(),
                })
            }
        })
    }
}

impl std::str::FromStr for AnyUrl {
    type Err = AnyStoreError;

    fn from_str(url: &str) -> Result<Self, AnyStoreError> {
        Self::parse(url)
    }
}

impl AnyStore {
    /// Opens the store `url` names, with each store's default options:
    /// [`AnyUrl::parse`], then [`AnyStore::connect`].
    ///
    /// # Errors
    /// As [`AnyUrl::parse`] and [`AnyStore::connect`].
    pub async fn from_url(url: &str) -> Result<Self, AnyStoreError> {
        Self::connect(&AnyUrl::parse(url)?).await
    }

    /// Opens the store of a checked URL with each store's default options. A SQLite file is
    /// created and migrated (blocking the thread while it opens); a PostgreSQL table is
    /// not: call [`AnyStore::migrate`]. For other options, open the store with its own
    /// crate and wrap it in its variant.
    ///
    /// # Errors
    /// The store crate's error (an unreachable server, a file that is not a database).
    pub async fn connect(url: &AnyUrl) -> Result<Self, AnyStoreError> {
        Ok(match url {
            AnyUrl::Memory => Self::Memory(MemoryStore::new()),
            #[cfg(feature = "sqlite")]
            AnyUrl::Sqlite(location) => Self::Sqlite(idemgate_sqlite::SqliteStore::open_location(
                location.clone(),
                Default::default(),
            )?),
            #[cfg(feature = "postgres")]
            AnyUrl::Postgres(url) => Self::Postgres(
                idemgate_postgres::PostgresStore::from_url(url, &Default::default()).await?,
            ),
            #[cfg(feature = "redis")]
            AnyUrl::Redis(url) => {
                Self::Redis(idemgate_redis::RedisStore::from_url(url, &Default::default()).await?)
            }
            #[cfg(feature = "client")]
            AnyUrl::KeyService(url) => {
                Self::KeyService(idemgate_client::KeyServiceStore::from_url(url)?)
            }
        })
    }

    /// Runs the store's pending schema migrations: PostgreSQL's (`PostgresStore::migrate`);
    /// the other stores have none to run (SQLite migrates when it opens).
    ///
    /// # Errors
    /// The store's error.
    pub async fn migrate(&self) -> Result<(), AnyStoreError> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => Ok(s.migrate().await?),
            _ => Ok(()),
        }
    }
}

/// `$e` with `$s` bound to the variant's store (`boxed`: awaited on its own allocation);
/// a key service gives `$k` instead, when one is given.
macro_rules! each {
    (@or $e:expr) => { $e };
    (@or $e:expr, $k:expr) => { $k };
    ($self:ident, $s:ident => boxed $e:expr $(, key_service => $k:expr)?) => {
        each!($self, $s => Box::pin($e).await $(, key_service => $k)?)
    };
    ($self:ident, $s:ident => $e:expr $(, key_service => $k:expr)?) => {
        match $self {
            AnyStore::Memory($s) => $e,
            #[cfg(feature = "sqlite")]
            AnyStore::Sqlite($s) => $e,
            #[cfg(feature = "postgres")]
            AnyStore::Postgres($s) => $e,
            #[cfg(feature = "redis")]
            AnyStore::Redis($s) => $e,
            #[cfg(feature = "client")]
            #[allow(unused_variables)]
            AnyStore::KeyService($s) => each!(@or $e $(, $k)?),
        }
    };
}

/// Implements a store trait for [`AnyStore`]: each `async fn` awaits the variant's own
/// (`boxed`, see [`each!`]); a key service answers `$k` instead, where one is given.
macro_rules! forward {
    (
        $(#[$doc:meta])*
        impl $trait:ident { $(fn $m:ident($($a:ident: $t:ty),*) -> $r:ty $(, key_service => $k:expr)?;)* }
        $($item:item)*
    ) => {
        $(#[$doc])*
        impl $trait for AnyStore {
            $(async fn $m(&self, $($a: $t),*) -> Result<$r> {
                each!(self, s => boxed s.$m($($a),*) $(, key_service => $k)?)
            })*
            $($item)*
        }
    };
}

forward! {
    impl IdempotencyStore {
        fn insert_or_get(req: &InsertRequest) -> InsertOutcome;
        fn take_over(seen: &IdempotencyRecord, token: LeaseToken, ttl: Duration) -> Option<Lease>;
        fn renew(lease: &Lease, ttl: Duration) -> UnixMillis;
        fn complete(lease: &Lease, r: &StoredResponse) -> ();
        fn fail(lease: &Lease) -> ();
        fn release(lease: &Lease) -> ();
        fn get(key: &ScopedKey) -> Option<IdempotencyRecord>;
        fn peek(key: &ScopedKey) -> Peeked;
        fn insert_or_get_unseen(req: &InsertRequest) -> InsertOutcome;
        fn announce(event: &KeyEvent) -> ();
        fn write_announced(lease: &Lease, write: OutcomeWrite<'_>, event: &KeyEvent) -> ();
        fn purge_expired(batch: NonZeroU32) -> u64;
        fn ping() -> ();
    }
    async fn listen(&self, sink: EventSink) {
        each!(self, s => s.listen(sink).await)
    }
    fn event_poll(&self) -> Duration {
        each!(self, s => s.event_poll())
    }
    fn backend(&self) -> &'static str {
        each!(self, s => s.backend())
    }
}

/// Why a key-service store has no operator operations or count here.
#[cfg(feature = "client")]
fn key_service() -> idemgate_core::StoreError {
    idemgate_core::StoreError::Backend(
        "idemgate:// records live in the key service: read them with GET /v1/records there, \
         or run inspect, release, resolve and stats against the key service's own store; \
         it exports its store's gauges on its own /metrics"
            .into(),
    )
}

forward! {
    /// The operator operations of the store; a key service's records are read there.
    impl AdminStore {
        fn list_key(filter: &KeyFilter) -> Listing, key_service => Err(key_service());
        fn delete_exact(seen: &RawRecord) -> bool, key_service => Err(key_service());
    }
}

forward! {
    /// The store's count; a key service counts its store on its own `/metrics`.
    impl GaugedStore {
        fn gauges() -> StoreCount, key_service => Err(key_service());
        fn count_exact() -> StoreCount, key_service => Err(key_service());
        fn count_sealed() -> Option<Vec<(String, u64)>>, key_service => Ok(None);
        fn count_expired(limit: NonZeroU32) -> Option<u64>, key_service => Ok(None);
        fn durability() -> Durability, key_service => Ok(Durability::new(
            idemgate_core::DurabilityLevel::Unknown,
            "records live in the key service: its own start-up log and /metrics say what its store can lose",
        ));
    }
}
