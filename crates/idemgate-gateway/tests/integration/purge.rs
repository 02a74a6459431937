//! The purge on every store (SQLite, PostgreSQL, Redis), under concurrent traffic: it
//! deletes exactly the expired records, never a live one.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use idemgate_core::testing::{fp, request, response, unique_key};
use idemgate_core::{GaugedStore, IdempotencyStore, InsertOutcome, ScopedKey};
use idemgate_gateway::purge::{run_once, PurgeOptions, QuietProgress};
use idemgate_gateway::store::{AnyStore, OpenOptions, StoreUrl};

use crate::support::*;

const DAY: Duration = Duration::from_secs(86_400);

/// A store of the test's own: a SQLite file in a temporary directory, a PostgreSQL table,
/// or a Redis key prefix; removed by [`Target::cleanup`].
pub(crate) enum Target {
    Sqlite(tempfile::TempDir),
    Postgres { url: String, table: String },
    Redis { url: String, prefix: String },
}

impl Target {
    pub(crate) fn sqlite() -> Self {
        Self::Sqlite(tempfile::tempdir().unwrap())
    }
    pub(crate) fn postgres() -> Option<Self> {
        let url = test_url("IDEMGATE_TEST_DATABASE_URL")?;
        let table = format!("idem_purge_{:012x}", rand_u64() >> 16);
        Some(Self::Postgres { url, table })
    }
    pub(crate) fn redis() -> Option<Self> {
        let url = test_url("IDEMGATE_TEST_REDIS_URL")?;
        let prefix = format!("idemgate-purge-test:{:012x}:", rand_u64() >> 16);
        Some(Self::Redis { url, prefix })
    }

    /// The store URL.
    pub(crate) fn url(&self) -> String {
        match self {
            Self::Sqlite(dir) => format!("sqlite://{}", dir.path().join("s.db").display()),
            Self::Postgres { url, .. } | Self::Redis { url, .. } => url.clone(),
        }
    }

    /// `store_table = ...` or `store_key_prefix = ...` for a config file.
    pub(crate) fn toml(&self) -> String {
        let scope = match self {
            Self::Sqlite(_) => String::new(),
            Self::Postgres { table, .. } => format!("store_table = \"{table}\"\n"),
            Self::Redis { prefix, .. } => format!("store_key_prefix = \"{prefix}\"\n"),
        };
        format!("store = \"{}\"\n{scope}", self.url())
    }

    /// `--table T` or `--key-prefix P` for `idemgate purge`.
    pub(crate) fn flags(&self) -> Vec<String> {
        match self {
            Self::Sqlite(_) => vec![],
            Self::Postgres { table, .. } => vec!["--table".into(), table.clone()],
            Self::Redis { prefix, .. } => vec!["--key-prefix".into(), prefix.clone()],
        }
    }

    /// Opens (creating and migrating) the store.
    pub(crate) async fn open(&self) -> AnyStore {
        let (table, key_prefix) = match self {
            Self::Sqlite(_) => (None, None),
            Self::Postgres { table, .. } => (Some(table.clone()), None),
            Self::Redis { prefix, .. } => (None, Some(prefix.clone())),
        };
        let opts = OpenOptions {
            table,
            key_prefix,
            migrate: true,
            create: true,
            store_token: None,
            store_ca_file: None,
            store_timeout: Duration::from_secs(2),
            max_connections: 16,
            replication: Default::default(),
        };
        idemgate_gateway::store::open(&StoreUrl::parse(&self.url()).unwrap(), &opts)
            .await
            .unwrap()
    }

    pub(crate) async fn cleanup(&self) {
        match self {
            Self::Sqlite(_) => {}
            Self::Postgres { url, table } => drop_pg_table(url, table).await,
            Self::Redis { url, prefix } => delete_redis_prefix(url, prefix).await,
        }
    }
}

/// Inserts a record for `k` living `ttl` (under a lease of half that, at most 10 s: a
/// record never expires under a live lease), completed when `complete`.
pub(crate) async fn record(s: &AnyStore, k: &ScopedKey, ttl: Duration, complete: bool) {
    let lease_ttl = (ttl / 2).min(Duration::from_secs(10));
    let lease = match s
        .insert_or_get(&request(k, fp(1), lease_ttl, ttl))
        .await
        .unwrap()
    {
        InsertOutcome::Inserted(lease) => lease,
        InsertOutcome::Existing { .. } => panic!("fresh key"),
    };
    if complete {
        s.complete(&lease, &response(16)).await.unwrap();
    }
}

/// Records that expire, records that live, then a purge in batches of 7 while new records
/// keep arriving and one expired key is used again: every expired record is gone, every
/// live one (old, new, re-acquired) is kept. `self_expiring`: the store deletes records
/// itself (Redis), so the purge deletes none and the expired ones are gone anyway.
async fn purge_under_traffic(target: Target, self_expiring: bool) {
    let s = Arc::new(target.open().await);
    let expiring: Vec<ScopedKey> = (0..40).map(|_| unique_key("alice")).collect();
    for (i, k) in expiring.iter().enumerate() {
        record(&s, k, Duration::from_millis(300), i % 2 == 0).await;
    }
    let mut live: Vec<ScopedKey> = (0..20).map(|_| unique_key("bob")).collect();
    for (i, k) in live.iter().enumerate() {
        record(&s, k, DAY, i % 3 != 0).await;
    }
    tokio::time::sleep(Duration::from_millis(600)).await; // the first 40 are past their TTL
    let traffic = {
        let s = s.clone();
        let reused = expiring[0].clone();
        tokio::spawn(async move {
            let mut new: Vec<ScopedKey> = vec![reused.clone()];
            record(&s, &reused, DAY, true).await;
            for i in 0..60 {
                let k = unique_key("carol");
                record(&s, &k, DAY, i % 2 == 0).await;
                new.push(k);
                tokio::task::yield_now().await;
            }
            new
        })
    };
    let opts = PurgeOptions {
        batch: NonZeroU32::new(7).unwrap(),
        max_rate: None,
        dry_run: false,
    };
    let report = run_once(&*s, &opts, &mut QuietProgress).await.unwrap();
    live.extend(traffic.await.unwrap());
    // A last pass, in case the purge finished before the re-used key's old record went.
    let second = run_once(&*s, &opts, &mut QuietProgress).await.unwrap();
    if self_expiring {
        assert_eq!(report.deleted + second.deleted, 0);
    } else {
        // 40, or 39 when the re-used key's expired record was replaced before the purge.
        let deleted = report.deleted + second.deleted;
        assert!(deleted == 40 || deleted == 39, "deleted {deleted}");
        assert_eq!(second.deleted, 0, "the first run left nothing expired");
    }
    for k in &live {
        assert!(s.get(k).await.unwrap().is_some(), "live record kept");
    }
    for k in &expiring[1..] {
        assert!(s.get(k).await.unwrap().is_none(), "expired record gone");
    }
    let g = s.gauges().await.unwrap();
    assert_eq!(g.records(), 81, "{g:?}");
    let expired = s.count_expired(NonZeroU32::MAX).await.unwrap();
    assert_eq!(expired, (!self_expiring).then_some(0));
    if let Target::Sqlite(_) | Target::Postgres { .. } = target {
        // Directly in the table: nothing past its expiry is left.
        assert_eq!(g.expired, Some(0));
    }
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_purge_under_traffic_deletes_exactly_the_expired() {
    purge_under_traffic(Target::sqlite(), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_purge_under_traffic_deletes_exactly_the_expired() {
    let Some(t) = Target::postgres() else { return };
    purge_under_traffic(t, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_purge_under_traffic_deletes_exactly_the_expired() {
    let Some(t) = Target::redis() else { return };
    purge_under_traffic(t, true).await;
}
