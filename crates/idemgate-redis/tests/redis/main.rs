//! Redis-specific tests of [`idemgate_redis::RedisStore`] on one server, gated on
//! `IDEMGATE_TEST_REDIS_URL` (unset: each case prints why and passes as skipped). One
//! binary, one module per topic. Each case uses a key prefix of its own and deletes the
//! keys it created.

#[path = "../common/mod.rs"]
mod common;

mod black_hole;
mod compat;
mod errors;
mod events;
mod expiry;
mod gauges;
mod loss;
mod records;
mod server;

use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(86_400);
