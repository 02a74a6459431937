//! [`RedisStore`]: configuration and the [`IdempotencyStore`] primitives (connecting is in
//! `url.rs`).

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use idemgate_core::events::{EventSink, KeyEvent};
use idemgate_core::record::duration_ms;
use idemgate_core::store::OutcomeWrite;
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
use crate::record::{array, int, Fields};
use crate::scripts::SCRIPTS;
use crate::wait::{Nodes, Waiter};

/// Longest lease or record TTL passed to the scripts: 100 years, in ms. Longer durations
/// are clamped to it (Lua numbers are doubles: exact up to 2^53).
const MAX_DURATION_MS: i64 = 100 * 365 * 86_400_000;

fn millis(d: Duration) -> i64 {
    duration_ms(d).min(MAX_DURATION_MS)
}

/// An [`IdempotencyStore`] on Redis (one server, the primary Sentinels name, or Redis Cluster).
///
/// Each record is one Redis hash under `<prefix>{<hex SHA-256 of the scope>}` that expires
/// by itself at the record's `expires_at` (`PEXPIREAT`). Every primitive is one Lua script
/// on that one key, so it is atomic, and on a cluster it runs on the record's slot. Times
/// (TTL, leases, timestamps) come from the server's `TIME`, never from this process.
///
/// Cloning is cheap: clones share the connection. A single-node connection is multiplexed
/// (concurrent requests are pipelined on one socket) and reconnects by itself after a
/// failure; see [`crate::RedisOptions`]. Read the crate docs for what Redis can lose.
///
/// With [`crate::RedisOptions::wait_replicas`] above 0, each fresh insert, take-over and
/// outcome write runs on a connection of its own followed by `WAIT` on it (a slow replica
/// then stalls only the writes waiting for it, never the shared connection); a write too
/// few replicas acknowledged is [`StoreError::Unavailable`], and the retry of an outcome write
/// whose first attempt landed waits again instead of answering [`StoreError::LeaseLost`].
#[derive(Clone)]
pub struct RedisStore {
    conn: Conn,
    prefix: Arc<str>,
    wait: Option<Arc<Waiter>>,
    /// Where the key events' subscription goes (`events.rs`); `None`: waiters poll.
    pub(crate) events: Option<Nodes>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("cluster", &self.is_cluster())
            .field("key_prefix", &self.prefix)
            .field("wait_replicas", &self.wait_replicas())
            .finish()
    }
}

// === impl RedisStore ===

impl RedisStore {
    /// A store on an existing single-node connection manager. Its timeouts are the
    /// caller's: configure a connection and a response timeout (as [`crate::RedisOptions`]
    /// does, 2 s each by default), or a server that stops answering hangs every call. Writes
    /// wait for no replica.
    pub fn from_connection_manager(conn: ConnectionManager) -> Self {
        Self::from_conn(Conn::Single(conn))
    }

    /// A store on an existing cluster connection; as for
    /// [`RedisStore::from_connection_manager`], its timeouts are the caller's.
    pub fn from_cluster_connection(conn: ClusterConnection) -> Self {
        Self::from_conn(Conn::Cluster(conn))
    }

    pub(crate) fn from_conn(conn: Conn) -> Self {
        Self {
            conn,
            prefix: Arc::from(DEFAULT_KEY_PREFIX),
            wait: None,
            events: None,
        }
    }

    /// Subscribes to key events on `nodes` (`events.rs`).
    pub(crate) fn with_events(mut self, nodes: Nodes) -> Self {
        self.events = Some(nodes);
        self
    }

    /// Makes each write wait for replicas through `waiter`.
    pub(crate) fn with_waiter(mut self, waiter: Waiter) -> Self {
        self.wait = Some(Arc::new(waiter));
        self
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

    /// The replicas each write waits for ([`crate::RedisOptions::wait_replicas`]); 0 when
    /// writes wait for none.
    pub fn wait_replicas(&self) -> u32 {
        self.wait.as_ref().map_or(0, |w| w.replicas())
    }

    /// How long each write waits for its replicas; `None` when writes wait for none.
    pub fn wait_timeout(&self) -> Option<Duration> {
        self.wait.as_ref().map(|w| w.timeout())
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

    /// Runs a write: on the shared connection, or, when writes wait for replicas, on a
    /// dedicated one followed by `WAIT` if `wrote` says the reply is a write.
    async fn write(
        &self,
        op: &'static str,
        invocation: &ScriptInvocation<'_>,
        wrote: fn(&Value) -> bool,
    ) -> Result<Value, StoreError> {
        match &self.wait {
            Some(waiter) => waiter.run(op, invocation, wrote).await,
            None => self.run(invocation).await,
        }
    }

    /// `"1"` when writes wait for replicas: the outcome scripts then answer 2 for a write
    /// an earlier attempt of the same lease already landed (see `rewritten` in
    /// `common.lua`), so its retry waits again instead of answering
    /// [`StoreError::LeaseLost`].
    pub(crate) fn confirm(&self) -> &'static str {
        if self.wait.is_some() {
            "1"
        } else {
            "0"
        }
    }

    /// Runs an outcome script (`held()` in `common.lua`): 1 written, 2 written by an
    /// earlier attempt of this lease (confirmed again), 0 → [`StoreError::LeaseLost`].
    /// Waits for replicas after 1 and, for `complete` and `fail`, after 2.
    pub(crate) async fn run_outcome(
        &self,
        op: &'static str,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<(), StoreError> {
        let wrote: fn(&Value) -> bool = match op {
            "release" => |v| matches!(v, Value::Int(1)),
            _ => |v| matches!(v, Value::Int(1 | 2)),
        };
        match int(&self.write(op, invocation, wrote).await?)? {
            0 => Err(StoreError::LeaseLost),
            _ => Ok(()),
        }
    }

    /// `script` on the record of `lease`, its fence and token the first arguments.
    pub(crate) fn lease_invocation(
        &self,
        script: &'static redis::Script,
        lease: &Lease,
    ) -> ScriptInvocation<'static> {
        let mut inv = script.key(self.record_key(&lease.key));
        inv.arg(lease.fence).arg(lease.token.0);
        inv
    }

    /// The `get.lua` reply for the Redis key `rkey`: the server clock and the record's
    /// fields as stored (none when the key is gone).
    pub(crate) async fn read_fields(
        &self,
        rkey: &[u8],
    ) -> Result<(UnixMillis, Fields), StoreError> {
        let mut items = array(self.run(&SCRIPTS.get.key(rkey)).await?)?;
        match (items.pop(), items.pop(), items.is_empty()) {
            (Some(fields), Some(now), true) => Ok((int(&now)?, Fields::from_value(fields)?)),
            _ => Err(unexpected("get: a reply has 2 items").into()),
        }
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
    /// `PUBLISH` on `<key prefix>events` (`events.rs`).
    async fn announce(&self, event: &KeyEvent) -> Result<(), StoreError> {
        self.publish(event).await
    }

    /// A subscription to `<key prefix>events` on a connection of its own (`events.rs`);
    /// none for a store on a cluster or a caller's connection manager.
    async fn listen(&self, sink: EventSink) {
        if let Some(nodes) = &self.events {
            self.subscribe(nodes, sink).await;
        }
    }

    /// With a subscription the poll only covers a lost event; without one it is how
    /// other processes' outcomes are seen.
    fn event_poll(&self) -> Duration {
        match self.events {
            Some(_) => Duration::from_secs(2),
            None => Duration::from_millis(250),
        }
    }

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
        // `{1, ...}`: inserted (waited for); `{0, ...}`: a live record, nothing written
        let inserted: fn(&Value) -> bool =
            |v| matches!(v, Value::Array(items) if items.first() == Some(&Value::Int(1)));
        Self::insert_outcome(req, self.write("insert_or_get", &inv, inserted).await?)
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
        let took: fn(&Value) -> bool = |v| matches!(v, Value::Array(_));
        let reply = self.write("take_over", &inv, took).await?;
        Ok(Self::taken_over(&seen.key, token, reply)?)
    }

    async fn renew(&self, lease: &Lease, lease_ttl: Duration) -> Result<UnixMillis, StoreError> {
        let mut inv = self.lease_invocation(&SCRIPTS.renew, lease);
        inv.arg(millis(lease_ttl));
        match int(&self.run(&inv).await?)? {
            0 => Err(StoreError::LeaseLost),
            lease_end => Ok(lease_end),
        }
    }

    async fn complete(&self, lease: &Lease, response: &StoredResponse) -> Result<(), StoreError> {
        let inv = self.outcome_invocation(lease, OutcomeWrite::Complete(response));
        self.run_outcome("complete", &inv).await
    }

    async fn fail(&self, lease: &Lease) -> Result<(), StoreError> {
        let inv = self.outcome_invocation(lease, OutcomeWrite::Fail);
        self.run_outcome("fail", &inv).await
    }

    /// With [`crate::RedisOptions::wait_replicas`] above 0, a release that finds no record
    /// succeeds without waiting (an earlier attempt deleted it, or it is gone anyway): a
    /// failover that brings a released record back leaves it `in_progress` under a lease
    /// nobody renews, which lapses and is taken over; no operation ran under it.
    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        let inv = self.outcome_invocation(lease, OutcomeWrite::Release);
        self.run_outcome("release", &inv).await
    }

    /// The outcome script `PUBLISH`es the event itself (`events.rs`).
    async fn write_announced(
        &self,
        lease: &Lease,
        write: OutcomeWrite<'_>,
        event: &KeyEvent,
    ) -> Result<(), StoreError> {
        self.write_with_event(lease, write, event).await
    }

    async fn get(&self, key: &ScopedKey) -> Result<Option<IdempotencyRecord>, StoreError> {
        let (now, fields) = self.read_fields(self.record_key(key).as_bytes()).await?;
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
