//! [`TestStore`]: a [`RedisStore`] that remembers every record key its test inserted and
//! deletes them when dropped (also when the test panics), and [`damage`], the conformance
//! suite's raw edits of a stored record.

use std::collections::BTreeSet;
use std::num::NonZeroU32;
use std::ops::Deref;
use std::sync::Mutex;
use std::time::Duration;

use idemgate_core::testing::Damage;
use idemgate_core::{
    IdempotencyRecord, IdempotencyStore, InsertOutcome, InsertRequest, Lease, LeaseToken,
    ScopedKey, StoreError, StoredResponse, UnixMillis,
};
use idemgate_redis::RedisStore;
use redis::aio::ConnectionLike;
use redis::AsyncCommands;

/// Where the keys of a [`TestStore`] live, for deleting them without the async runtime.
#[derive(Clone, Debug)]
pub(crate) enum Cleanup {
    /// One server, by URL.
    Single(String),
    /// A cluster, by node URLs.
    Cluster(Vec<String>),
}

/// A store for one test: derefs to the [`RedisStore`], and its [`IdempotencyStore`] methods
/// are the store's, recording each key inserted so that dropping the store deletes it.
#[derive(Debug)]
pub(crate) struct TestStore {
    store: RedisStore,
    cleanup: Cleanup,
    keys: Mutex<BTreeSet<String>>,
}

impl TestStore {
    /// Wraps `store`, whose server `cleanup` names.
    pub(crate) fn new(store: RedisStore, cleanup: Cleanup) -> Self {
        Self {
            store,
            cleanup,
            keys: Mutex::default(),
        }
    }

    /// Deletes the record of `key` when the store is dropped (for keys a test created
    /// behind the store's back, e.g. with `RENAME`).
    pub(crate) fn track(&self, key: &ScopedKey) {
        let redis_key = self.store.record_key(key);
        self.keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(redis_key);
    }

    /// A plain async connection to the store's server or cluster.
    pub(crate) async fn raw(&self) -> RawConn {
        match &self.cleanup {
            Cleanup::Single(url) => RawConn::Single(super::raw(url).await),
            Cleanup::Cluster(nodes) => RawConn::Cluster(
                redis::cluster::ClusterClient::new(nodes.clone())
                    .unwrap()
                    .get_async_connection()
                    .await
                    .expect("connect to the test cluster"),
            ),
        }
    }
}

impl Deref for TestStore {
    type Target = RedisStore;

    fn deref(&self) -> &RedisStore {
        &self.store
    }
}

impl Drop for TestStore {
    fn drop(&mut self) {
        let keys = std::mem::take(self.keys.get_mut().unwrap_or_else(|e| e.into_inner()));
        if keys.is_empty() {
            return;
        }
        // Synchronous, so it also runs when the test panicked; errors are ignored (a
        // panic while unwinding would abort), and the next run's sweep catches leftovers.
        let deleted = match &self.cleanup {
            Cleanup::Single(url) => delete_single(url, &keys),
            Cleanup::Cluster(nodes) => delete_cluster(nodes, &keys),
        };
        if let Err(e) = deleted {
            eprintln!("test store: could not delete {} keys: {e}", keys.len());
        }
    }
}

const CLEANUP_TIMEOUT: Duration = Duration::from_secs(5);

fn delete_single(url: &str, keys: &BTreeSet<String>) -> redis::RedisResult<()> {
    let mut conn = redis::Client::open(url)?.get_connection_with_timeout(CLEANUP_TIMEOUT)?;
    conn.set_read_timeout(Some(CLEANUP_TIMEOUT))?;
    redis::cmd("DEL")
        .arg(keys.iter().collect::<Vec<_>>())
        .exec(&mut conn)
}

fn delete_cluster(nodes: &[String], keys: &BTreeSet<String>) -> redis::RedisResult<()> {
    let client = redis::cluster::ClusterClientBuilder::new(nodes.to_vec())
        .connection_timeout(CLEANUP_TIMEOUT)
        .response_timeout(CLEANUP_TIMEOUT)
        .build()?;
    let mut conn = client.get_connection()?;
    // one key per command: the keys hash to different slots
    for key in keys {
        redis::cmd("DEL").arg(key).exec(&mut conn)?;
    }
    Ok(())
}

idemgate_core::delegate_store!(TestStore, store, on_insert = track);
idemgate_core::delegate_admin!(TestStore, store);

/// A plain connection to one server or a cluster, for looking behind the store's back.
#[derive(Clone)]
pub(crate) enum RawConn {
    /// One server.
    Single(redis::aio::MultiplexedConnection),
    /// A cluster.
    Cluster(redis::cluster_async::ClusterConnection),
}

impl ConnectionLike for RawConn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }
    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(cmd, offset, count),
            Self::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }
    fn get_db(&self) -> i64 {
        0
    }
}

/// The conformance suite's damage, done with raw `HGET`/`HSET`/`HDEL` on the record hash
/// (field names in `src/scripts/common.lua`), mirroring [`Damage::apply`].
pub(crate) async fn damage(store: &TestStore, key: &ScopedKey, damage: Damage) {
    let mut raw = store.raw().await;
    let k = store.record_key(key);
    let exists: bool = raw.exists(&k).await.unwrap();
    assert!(exists, "no record to damage");
    let _: () = match damage {
        Damage::TruncateBody => {
            let body: Vec<u8> = raw.hget(&k, "rb").await.unwrap();
            let cut = &body[..body.len().saturating_sub(7)];
            raw.hset(&k, "rb", cut).await.unwrap()
        }
        Damage::InvalidStatus => raw.hset(&k, "rs", 1000).await.unwrap(),
        Damage::AlteredStatus => raw.hset(&k, "rs", 200).await.unwrap(),
        Damage::DropHeaders => raw.hdel(&k, "rh").await.unwrap(),
        Damage::DropBody => raw.hdel(&k, "rb").await.unwrap(),
        Damage::FlipChecksum => {
            let mut sum: Vec<u8> = raw.hget(&k, "cs").await.unwrap();
            sum[0] ^= 1;
            raw.hset(&k, "cs", sum).await.unwrap()
        }
        Damage::UnknownState => raw.hset(&k, "st", "done").await.unwrap(),
        Damage::DropChecksum => raw.hdel(&k, "cs").await.unwrap(),
    };
}
