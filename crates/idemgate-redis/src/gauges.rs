//! [`GaugedStore`] for [`RedisStore`], the one count of `idemgate stats` and the gauges:
//! from a scan of the prefix's keys while the database is small, from a random sample of
//! keys past that (marked approximate).

use std::num::NonZeroU32;

use idemgate_core::durability::Durability;
use idemgate_core::gauges::{GaugedStore, RecordFacts, StoreCount};
use idemgate_core::{RecordState, StoreError};
use redis::{FromRedisValue, ToRedisArgs, Value};

use crate::conn::Conn;
use crate::error::classify;
use crate::store::RedisStore;

/// Up to this many keys in the database (`DBSIZE`), the prefix's keys are all scanned and
/// the counts are exact; past it, [`SAMPLE_KEYS`] random keys are read and the counts
/// scaled (approximate).
pub const SCAN_ALL_BELOW: i64 = 20_000;

/// Keys read per sample (`RANDOMKEY`).
pub const SAMPLE_KEYS: usize = 1_000;

/// One key's state, lease expiry, expiry, creation and body length; nil for a key that is
/// not a hash (another program's key under the prefix is skipped, never an error).
const READ: &str = "if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then return false end \
    local f = redis.call('HMGET', KEYS[1], 'st', 'le', 'ex', 'ca') \
    return {f[1] or false, f[2] or false, f[3] or false, f[4] or false, \
    redis.call('HSTRLEN', KEYS[1], 'rb')}";

/// One key's key id of a sealed response (`ki`); nil when in clear or not a hash.
const READ_KEY_ID: &str = "if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then return false end \
    return redis.call('HGET', KEYS[1], 'ki')";

fn int(v: &Value) -> Option<i64> {
    Option::<i64>::from_redis_value(v).ok().flatten()
}

impl RedisStore {
    /// The exact count: every key of the prefix, scanned on every primary.
    async fn scan_count(&self, now: i64) -> Result<StoreCount, StoreError> {
        let mut conn = self.conn();
        let mut g = StoreCount {
            now,
            body_bytes: Some(0),
            ..StoreCount::default()
        };
        let mut scan = self.start_scan().await?;
        while let Some((_, keys)) = self.next_page(&mut scan).await? {
            self.count_keys(&mut conn, &keys, &mut g).await?;
        }
        Ok(g)
    }

    /// Reads each key's state, lease, expiry, creation and body length into `g`.
    async fn count_keys(
        &self,
        conn: &mut Conn,
        keys: &[impl ToRedisArgs],
        g: &mut StoreCount,
    ) -> Result<(), StoreError> {
        // One slot per pipeline on a cluster; 100 keys per pipeline on one server.
        let per = if self.is_cluster() { 1 } else { 100 };
        for chunk in keys.chunks(per) {
            let mut pipe = redis::pipe();
            for k in chunk {
                pipe.cmd("EVAL").arg(READ).arg(1).arg(k);
            }
            let replies: Vec<Value> = pipe.query_async(conn).await.map_err(classify)?;
            for reply in replies {
                let Value::Array(f) = reply else {
                    continue; // gone meanwhile, or not a hash
                };
                // A record's hash without a readable state is corrupt: counted as unknown.
                let state = f
                    .first()
                    .and_then(|v| Option::<String>::from_redis_value(v).ok().flatten());
                let at = |i: usize| f.get(i).and_then(int);
                g.count(
                    state.as_deref().and_then(RecordState::parse),
                    RecordFacts {
                        lease_expires_at: at(1),
                        expires_at: at(2),
                        created_at: at(3),
                        body_bytes: at(4).map(|n| n.max(0) as u64),
                    },
                );
            }
        }
        Ok(())
    }
}

impl RedisStore {
    /// Records per key id of a sealed response: every key of the prefix, scanned on every
    /// primary, one short read-only script per key, pipelined.
    async fn scan_sealed(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let mut conn = self.conn();
        let mut by_id = std::collections::BTreeMap::<String, u64>::new();
        let per = if self.is_cluster() { 1 } else { 100 };
        let mut scan = self.start_scan().await?;
        while let Some((_, keys)) = self.next_page(&mut scan).await? {
            for chunk in keys.chunks(per) {
                let mut pipe = redis::pipe();
                for k in chunk {
                    pipe.cmd("EVAL").arg(READ_KEY_ID).arg(1).arg(k);
                }
                let ids: Vec<Option<Vec<u8>>> =
                    pipe.query_async(&mut conn).await.map_err(classify)?;
                for id in ids.into_iter().flatten() {
                    *by_id
                        .entry(String::from_utf8_lossy(&id).into_owned())
                        .or_default() += 1;
                }
            }
        }
        Ok(by_id.into_iter().collect())
    }
}

impl GaugedStore for RedisStore {
    /// Exact while the database holds at most [`SCAN_ALL_BELOW`] keys (a `SCAN` of the
    /// prefix, then one short read-only script per key, pipelined); past that, and always on a
    /// cluster, approximate: [`SAMPLE_KEYS`] `RANDOMKEY`s, the prefix's share of them scaled
    /// by `DBSIZE` (`approximate` is set; the oldest record is the oldest sampled). Redis
    /// drops every record at its `expires_at`, so `expired` is `None`: nothing waits for a
    /// purge. Body bytes are the stored bodies' lengths, not Redis's memory use.
    async fn gauges(&self) -> Result<StoreCount, StoreError> {
        let mut conn = self.conn();
        let now = self.server_now().await?;
        let dbsize: i64 = redis::cmd("DBSIZE")
            .query_async(&mut conn)
            .await
            .map_err(classify)?;
        if !self.is_cluster() && dbsize <= SCAN_ALL_BELOW {
            return self.scan_count(now).await;
        }
        // SAMPLE_KEYS random keys of the database (of every prefix); this prefix's are read.
        let mut mine = Vec::new();
        for _ in 0..SAMPLE_KEYS {
            let k: Option<String> = redis::cmd("RANDOMKEY")
                .query_async(&mut conn)
                .await
                .map_err(classify)?;
            mine.extend(k.filter(|k| k.starts_with(self.key_prefix())));
        }
        let mut g = StoreCount {
            now,
            body_bytes: Some(0),
            ..StoreCount::default()
        };
        self.count_keys(&mut conn, &mine, &mut g).await?;
        let scale = dbsize.max(0) as f64 / SAMPLE_KEYS as f64;
        let s = |n: u64| (n as f64 * scale).round() as u64;
        (g.in_progress, g.completed, g.failed) = (s(g.in_progress), s(g.completed), s(g.failed));
        g.unknown_state = s(g.unknown_state);
        g.stuck_in_progress = s(g.stuck_in_progress);
        g.body_bytes = g.body_bytes.map(s);
        g.approximate = true;
        Ok(g)
    }

    /// A `SCAN` of the prefix's keys on every primary, whatever the database's size.
    async fn count_exact(&self) -> Result<StoreCount, StoreError> {
        let now = self.server_now().await?;
        self.scan_count(now).await
    }

    /// A `SCAN` of the prefix's keys on every primary, whatever the database's size.
    async fn count_sealed(&self) -> Result<Option<Vec<(String, u64)>>, StoreError> {
        Ok(Some(self.scan_sealed().await?))
    }

    /// `None`: Redis deletes each record itself at its `expires_at`.
    async fn count_expired(&self, _limit: NonZeroU32) -> Result<Option<u64>, StoreError> {
        Ok(None)
    }

    /// Read from the server (the primary through Sentinel; every primary of a cluster, the
    /// weakest answering for all): `appendonly`, `appendfsync` and `min-replicas-to-write`
    /// (`CONFIG GET`; where it is refused, `INFO persistence` for `aof_enabled` and the
    /// refusal as a fact), the replicas from `INFO replication` (`connected_slaves`, and
    /// those acknowledging within 2 s), and the store's `WAIT` setting.
    /// [`idemgate_core::durability::DurabilityLevel::Replicated`] when each write waits for
    /// `wait_replicas` ≥ 1 and that many replicas acknowledge; else `Local` with `appendonly
    /// yes` and `appendfsync always`; else `Volatile`. With too few replicas acknowledging
    /// for the `WAIT` setting, `refusing_new_keys` says new keys get `503`.
    async fn durability(&self) -> Result<Durability, StoreError> {
        self.read_durability().await
    }
}
