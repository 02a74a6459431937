//! [`idemgate_redis::RedisStore`] against real replication: a primary, a replica and three
//! Sentinels started for each case by `scripts/cluster/redis.sh` (ports it picks, files in a
//! directory of its own, all stopped and deleted when the case ends, also on a panic).
//! Gated on `IDEMGATE_TEST_REDIS_URL` (the local server the durability case reads too) and
//! on `redis-server` being installed; otherwise each case prints why and passes as skipped.
//!
//! - `wait`: `wait_replicas` with a stalled replica: fresh keys and outcome writes are not
//!   confirmed, everything else is answered, and writes land once the replica is back.
//! - `failover`: a `redis+sentinel://` store follows a `kill -9` of its primary and loses no
//!   acknowledged record.
//! - `lifecycle`: what the core's lifecycle makes of unconfirmed writes.
//! - `durability`: the durability report of the local server and of the replicated pair.
//! - `cost`: what waiting costs per fresh key (ignored: run it by name).

#[path = "../common/mod.rs"]
mod common;

mod cost;
mod durability;
mod failover;
mod lifecycle;
mod replica_set;
mod wait;

use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(86_400);
/// The `wait_timeout` of the cases.
const WAIT: Duration = Duration::from_millis(500);
