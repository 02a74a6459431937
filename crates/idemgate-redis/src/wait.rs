//! Waiting for replicas after a write (`WAIT`, [`crate::RedisOptions::wait_replicas`]):
//! [`Waiter`].
//!
//! `WAIT` blocks the connection it is sent on until enough replicas acknowledged or its
//! timeout passed, and it counts only the writes sent on that connection. A waited write
//! therefore never runs on the store's shared (multiplexed) connection, where a slow
//! replica would stall every other request behind it for up to `wait_timeout`: it takes a
//! connection of its own from a small pool, runs its script there and, when the script
//! wrote, sends `WAIT` on that same connection. Reads, renewals, and every call of a store
//! that waits for no replica, stay on the shared connection.
//!
//! Cost: one more round trip per write that wrote (the `WAIT`; an insert that found a live
//! record sends none), plus the replicas' acknowledgement; and one connection per waited
//! write in flight: up to [`MAX_IDLE`] are kept between calls, more are opened under load
//! and closed after use.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use idemgate_core::StoreError;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError, RedisResult, ScriptInvocation, Value};

use crate::error::{classify, RedisStoreError};
use crate::options::{async_config, RedisOptions};
use crate::sentinel::{check_primary, primary_lost, SentinelConn};

/// Dedicated connections kept open between waited writes.
pub(crate) const MAX_IDLE: usize = 16;

/// Where dedicated connections go: the one server, or the primary the Sentinels name.
#[derive(Clone)]
pub(crate) enum Nodes {
    /// One server.
    Single(Arc<Client>),
    /// The Sentinels' primary; dedicated connections are checked to be on a primary.
    Sentinel(SentinelConn),
}

/// A connection used by one waited write at a time, to the primary of `generation` (0 for
/// one server).
struct Dedicated {
    conn: MultiplexedConnection,
    generation: u64,
}

/// Runs writes that wait for replicas, each on a dedicated connection.
pub(crate) struct Waiter {
    replicas: u32,
    timeout: Duration,
    nodes: Nodes,
    config: AsyncConnectionConfig,
    idle: Mutex<Vec<Dedicated>>,
}

impl Waiter {
    /// A waiter for `opts.wait_replicas` (above 0) replicas; dedicated connections answer
    /// within the response timeout plus the wait timeout.
    pub(crate) fn new(nodes: Nodes, opts: &RedisOptions) -> Self {
        Self {
            replicas: opts.wait_replicas,
            timeout: opts.wait_timeout,
            nodes,
            config: async_config(opts, opts.response_timeout + opts.wait_timeout),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// The replicas each write waits for.
    pub(crate) fn replicas(&self) -> u32 {
        self.replicas
    }

    /// How long a write waits for them.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    fn timeout_ms(&self) -> u64 {
        // `WAIT n 0` would block forever
        u64::try_from(self.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// Runs `inv` on a dedicated connection and, when `wrote` says its reply is a write,
    /// waits for the replicas on that connection.
    ///
    /// # Errors
    /// As the shared connection's calls; and [`StoreError::Unavailable`] holding
    /// [`RedisStoreError::NotAcknowledged`] when fewer replicas than asked acknowledged
    /// the write in time (counted in `idempotency_store_unconfirmed_writes_total`).
    pub(crate) async fn run(
        &self,
        op: &'static str,
        inv: &ScriptInvocation<'_>,
        wrote: fn(&Value) -> bool,
    ) -> Result<Value, StoreError> {
        let mut d = self.take().await.map_err(classify)?;
        let reply = match inv.invoke_async::<Value>(&mut d.conn).await {
            Ok(reply) => reply,
            Err(e) => return Err(self.discard(d, e)),
        };
        if !wrote(&reply) {
            self.put(d);
            return Ok(reply);
        }
        let acknowledged: i64 = match redis::cmd("WAIT")
            .arg(self.replicas)
            .arg(self.timeout_ms())
            .query_async(&mut d.conn)
            .await
        {
            Ok(n) => n,
            Err(e) => return Err(self.discard(d, e)),
        };
        self.put(d);
        if acknowledged >= i64::from(self.replicas) {
            return Ok(reply);
        }
        Err(self.unconfirmed(op, acknowledged))
    }

    fn unconfirmed(&self, op: &'static str, acknowledged: i64) -> StoreError {
        let timeout_ms = self.timeout_ms();
        let counter = "idempotency_store_unconfirmed_writes_total";
        metrics::counter!(counter, "backend" => "redis", "op" => op).increment(1);
        tracing::warn!(
            op,
            wanted = self.replicas,
            acknowledged,
            timeout_ms,
            "a Redis write was not acknowledged by enough replicas in time: answered as unconfirmed"
        );
        RedisStoreError::NotAcknowledged {
            op,
            wanted: self.replicas,
            acknowledged,
            timeout_ms,
        }
        .into()
    }

    /// An idle connection to the current primary, or a new one.
    async fn take(&self) -> RedisResult<Dedicated> {
        let (client, generation, sentinel) = match &self.nodes {
            Nodes::Single(client) => (Arc::clone(client), 0, None),
            Nodes::Sentinel(s) => {
                let p = s.primary().await?;
                (p.client, p.generation, Some(s))
            }
        };
        if let Some(d) = self.pop(generation) {
            return Ok(d);
        }
        let opened = async {
            let mut conn = client
                .get_multiplexed_async_connection_with_config(&self.config)
                .await?;
            if sentinel.is_some() {
                check_primary(&mut conn).await?;
            }
            Ok(conn)
        };
        match opened.await {
            Ok(conn) => Ok(Dedicated { conn, generation }),
            Err(e) => {
                if let Some(s) = sentinel.filter(|_| primary_lost(&e)) {
                    s.lost(generation, &e);
                }
                Err(e)
            }
        }
    }

    /// An idle connection to primary `generation`; idle ones to earlier primaries are closed.
    fn pop(&self, generation: u64) -> Option<Dedicated> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        idle.retain(|d| d.generation == generation);
        idle.pop()
    }

    fn put(&self, d: Dedicated) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_IDLE {
            idle.push(d);
        }
    }

    /// Closes `d` after `e` (its state is unknown), tells the Sentinel connection when the
    /// primary may be gone, and classifies `e`.
    fn discard(&self, d: Dedicated, e: RedisError) -> StoreError {
        if let Nodes::Sentinel(s) = &self.nodes {
            if primary_lost(&e) {
                s.lost(d.generation, &e);
            }
        }
        classify(e)
    }
}
