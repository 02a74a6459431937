//! [`RedisStore`]: construction, configuration and the [`IdempotencyStore`] primitives.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use idemgate_core::integrity::response_checksum;
use idemgate_core::record::duration_ms;
use idemgate_core::{
    IdempotencyRecord, IdempotencyStore, InsertOutcome, InsertRequest, Lease, LeaseToken,
    ScopedKey, StoreError, StoredResponse, UnixMillis,
};
use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::{ScriptInvocation, Value};

use crate::conn::Conn;
use crate::error::{classify, unexpected, Result};
use crate::key::{record_key, validate_prefix, DEFAULT_KEY_PREFIX};
use crate::options::{connect_cluster, connect_single, parse_url, RedisOptions, Target};
use crate::record::{array, int, Fields};
use crate::scripts::SCRIPTS;

/// Longest lease or record TTL passed to the scripts: 100 years, in ms. Longer durations
/// are clamped to it (Lua numbers are doubles: exact up to 2^53).
const MAX_DURATION_MS: i64 = 100 * 365 * 86_400_000;

fn millis(d: Duration) -> i64 {
    duration_ms(d).min(MAX_DURATION_MS)
}

fn flag(b: bool) -> &'static str {
    if b {
        "1"
    } else {
        "0"
    }
}

/// An [`IdempotencyStore`] on Redis (one server, or Redis Cluster).
///
/// Each record is one Redis hash under `<prefix>{<hex SHA-256 of the scope>}` that expires
/// by itself at the record's `expires_at` (`PEXPIREAT`). Every primitive is one Lua script
/// on that one key, so it is atomic, and on a cluster it runs on the record's slot. Times
/// (TTL, leases, timestamps) come from the server's `TIME`, never from this process.
///
/// Cloning is cheap: clones share the connection. A single-node connection is multiplexed
/// (concurrent requests are pipelined on one socket) and reconnects by itself after a
/// failure; see [`RedisOptions`]. Read the crate docs for what Redis can lose.
#[derive(Clone)]
pub struct RedisStore {
    conn: Conn,
    prefix: Arc<str>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("cluster", &self.is_cluster())
            .field("key_prefix", &self.prefix)
            .finish()
    }
}

// === impl RedisStore ===

impl RedisStore {
    /// Connects with [`RedisOptions::default`]; see [`RedisStore::connect_with`].
    ///
    /// # Errors
    /// As [`RedisStore::connect_with`].
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, &RedisOptions::default()).await
    }

    /// Connects to the server or cluster `url` names and checks that it answers. Keys get
    /// the prefix `idemgate:` unless changed with [`RedisStore::with_key_prefix`].
    ///
    /// URL forms:
    /// - `redis://[user[:password]@]host[:port][/db]` (default port 6379, database 0);
    /// - `rediss://...`: the same over TLS (rustls, with the system's root certificates);
    /// - `redis+unix:///path/to/redis.sock[?db=N]`;
    /// - `redis+cluster://[user[:password]@]host:port,host:port,...`: Redis Cluster, from
    ///   any of its nodes (the others are discovered); `rediss+cluster://` over TLS.
    ///
    /// # Errors
    /// [`crate::RedisStoreError::InvalidUrl`] for a URL of another form;
    /// [`crate::RedisStoreError::Redis`] if the server cannot be reached or refuses the
    /// login.
    pub async fn connect_with(url: &str, options: &RedisOptions) -> Result<Self> {
        match parse_url(url)? {
            Target::Single(url) => Ok(Self::from_conn(Conn::Single(
                connect_single(&url, options).await?,
            ))),
            Target::Cluster(nodes) => Self::connect_cluster(&nodes, options).await,
        }
    }

    /// Connects to Redis Cluster from the URLs of some of its nodes (`redis://host:port` or
    /// `rediss://host:port`, with credentials if needed); the others are discovered.
    ///
    /// # Errors
    /// [`crate::RedisStoreError::InvalidUrl`] if `nodes` is empty;
    /// [`crate::RedisStoreError::Redis`] if no node can be reached or the cluster cannot
    /// report its slots.
    pub async fn connect_cluster<S: AsRef<str>>(
        nodes: &[S],
        options: &RedisOptions,
    ) -> Result<Self> {
        let nodes: Vec<String> = nodes.iter().map(|n| n.as_ref().to_owned()).collect();
        Ok(Self::from_conn(Conn::Cluster(
            connect_cluster(&nodes, options).await?,
        )))
    }

    /// A store on an existing single-node connection manager. Its timeouts are the
    /// caller's: configure a connection and a response timeout (as [`RedisOptions`] does,
    /// 2 s each by default), or a server that stops answering hangs every call.
    pub fn from_connection_manager(conn: ConnectionManager) -> Self {
        Self::from_conn(Conn::Single(conn))
    }

    /// A store on an existing cluster connection; as for
    /// [`RedisStore::from_connection_manager`], its timeouts are the caller's.
    pub fn from_cluster_connection(conn: ClusterConnection) -> Self {
        Self::from_conn(Conn::Cluster(conn))
    }

    fn from_conn(conn: Conn) -> Self {
        Self {
            conn,
            prefix: Arc::from(DEFAULT_KEY_PREFIX),
        }
    }

    /// Puts every record key under `prefix` (default `idemgate:`), so several gateways or
    /// test runs can share one server.
    ///
    /// # Errors
    /// [`crate::RedisStoreError::InvalidPrefix`] if `prefix` holds `{` or `}` (the record's
    /// cluster hash tag follows it) or is longer than 256 bytes.
    pub fn with_key_prefix(mut self, prefix: &str) -> Result<Self> {
        validate_prefix(prefix)?;
        self.prefix = Arc::from(prefix);
        Ok(self)
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.prefix
    }

    /// True when connected to Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    /// The Redis key holding the record of `key`: `<prefix>{<64 hex digits>}`, the digits
    /// being SHA-256 over the length-prefixed principal, route and key. For operators
    /// (`redis-cli HGETALL`, `DEL`) and tests.
    pub fn record_key(&self, key: &ScopedKey) -> String {
        record_key(&self.prefix, key)
    }

    pub(crate) fn conn(&self) -> Conn {
        self.conn.clone()
    }

    async fn run(&self, invocation: &ScriptInvocation<'_>) -> Result<Value, StoreError> {
        invocation
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(classify)
    }

    /// Runs a compare-and-set script (`held()` in `common.lua`) and maps its 0 to
    /// [`StoreError::LeaseLost`].
    async fn run_held(&self, invocation: &ScriptInvocation<'_>) -> Result<i64, StoreError> {
        match int(&self.run(invocation).await?)? {
            0 => Err(StoreError::LeaseLost),
            n => Ok(n),
        }
    }

    fn lease_invocation(
        script: &'static redis::Script,
        key: String,
        lease: &Lease,
    ) -> ScriptInvocation<'static> {
        let mut inv = script.key(key);
        inv.arg(lease.fence).arg(lease.token.0);
        inv
    }

    /// The outcome of an `insert_or_get.lua` reply: `{1, now, fence, lease_expires_at}`
    /// or `{0, now, {value, ...}}` (the values of [`Fields::NAMES`], in order).
    fn insert_outcome(req: &InsertRequest, reply: Value) -> Result<InsertOutcome, StoreError> {
        let mut items = array(reply)?;
        let tag = items.first().map(int).transpose()?;
        match (tag, items.len()) {
            (Some(1), 4) => Ok(InsertOutcome::Inserted(Lease {
                key: req.key.clone(),
                fence: int(&items[2])?,
                token: req.token,
                expires_at: int(&items[3])?,
            })),
            (Some(0), 3) => {
                let fields = Fields::from_values(items.swap_remove(2))?;
                Ok(InsertOutcome::Existing {
                    now: int(&items[1])?,
                    record: fields.into_record(&req.key)?,
                })
            }
            _ => Err(unexpected("insert_or_get: a reply of another shape").into()),
        }
    }

    /// The lease of a `take_over.lua` reply: `{fence, lease_expires_at}`, or 0.
    fn taken_over(key: &ScopedKey, token: LeaseToken, reply: Value) -> Result<Option<Lease>> {
        match reply {
            Value::Int(0) => Ok(None),
            Value::Array(items) => match items.as_slice() {
                [fence, lease_end] => Ok(Some(Lease {
                    key: key.clone(),
                    fence: int(fence)?,
                    token,
                    expires_at: int(lease_end)?,
                })),
                _ => Err(unexpected("take_over: a lease reply has 2 items")),
            },
            other => Err(unexpected(format!("take_over: reply {other:?}"))),
        }
    }
}

impl IdempotencyStore for RedisStore {
    async fn insert_or_get(&self, req: &InsertRequest) -> Result<InsertOutcome, StoreError> {
        let mut inv = SCRIPTS.insert_or_get.key(self.record_key(&req.key));
        inv.arg(&req.key.principal)
            .arg(&req.key.route)
            .arg(req.key.key.as_str())
            .arg(req.fingerprint.version)
            .arg(&req.fingerprint.digest[..])
            .arg(req.token.0)
            .arg(millis(req.lease_ttl))
            .arg(millis(req.record_ttl));
        Self::insert_outcome(req, self.run(&inv).await?)
    }

    async fn take_over(
        &self,
        seen: &IdempotencyRecord,
        token: LeaseToken,
        lease_ttl: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        // absent (None) is sent as '' and matches a missing or unreadable field
        let decimal = |n: Option<i64>| n.map(|n| n.to_string()).unwrap_or_default();
        let mut inv = SCRIPTS.take_over.key(self.record_key(&seen.key));
        inv.arg(seen.state.as_str())
            .arg(seen.fence)
            .arg(decimal(seen.lease_token.map(|t| t.0)))
            .arg(decimal(seen.lease_expires_at))
            .arg(token.0)
            .arg(millis(lease_ttl));
        Ok(Self::taken_over(&seen.key, token, self.run(&inv).await?)?)
    }

    async fn renew(&self, lease: &Lease, lease_ttl: Duration) -> Result<UnixMillis, StoreError> {
        let key = self.record_key(&lease.key);
        let mut inv = Self::lease_invocation(&SCRIPTS.renew, key, lease);
        inv.arg(millis(lease_ttl));
        self.run_held(&inv).await
    }

    async fn complete(&self, lease: &Lease, response: &StoredResponse) -> Result<(), StoreError> {
        let key = self.record_key(&lease.key);
        let mut inv = Self::lease_invocation(&SCRIPTS.complete, key, lease);
        inv.arg(response.status)
            .arg(response.encode_headers())
            .arg(response.body.as_ref())
            .arg(flag(response.replayable))
            .arg(&response_checksum(&lease.key, response)[..]);
        self.run_held(&inv).await.map(drop)
    }

    async fn fail(&self, lease: &Lease) -> Result<(), StoreError> {
        let key = self.record_key(&lease.key);
        let inv = Self::lease_invocation(&SCRIPTS.fail, key, lease);
        self.run_held(&inv).await.map(drop)
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        let key = self.record_key(&lease.key);
        let inv = Self::lease_invocation(&SCRIPTS.release, key, lease);
        self.run_held(&inv).await.map(drop)
    }

    async fn get(&self, key: &ScopedKey) -> Result<Option<IdempotencyRecord>, StoreError> {
        let inv = SCRIPTS.get.key(self.record_key(key));
        let mut items = array(self.run(&inv).await?)?;
        let (now, fields) = match (items.pop(), items.pop(), items.is_empty()) {
            (Some(fields), Some(now), true) => (int(&now)?, Fields::from_value(fields)?),
            _ => return Err(unexpected("get: a reply has 2 items").into()),
        };
        // Redis drops the key at `expires_at`; the comparison covers the instant between.
        if fields.is_empty() || fields.expires_at().is_some_and(|ex| now >= ex) {
            return Ok(None);
        }
        Ok(Some(fields.into_record(key)?))
    }

    /// Returns 0 without touching the server: Redis deletes every record itself at its
    /// `expires_at` (each key carries `PEXPIREAT`), so there is never anything to purge. An
    /// expired record reads as absent meanwhile, and a record inserted again after expiry is a
    /// new key with a new expiry. Scanning the keyspace instead would cost O(keys) and, on
    /// a cluster, a round over every node, for nothing.
    async fn purge_expired(&self, _batch: NonZeroU32) -> Result<u64, StoreError> {
        Ok(0)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        redis::cmd("PING")
            .query_async::<Value>(&mut self.conn.clone())
            .await
            .map(drop)
            .map_err(classify)
    }

    fn backend(&self) -> &'static str {
        "redis"
    }
}
