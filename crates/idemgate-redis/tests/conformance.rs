//! The store conformance suite against [`idemgate_redis::RedisStore`] on one server, gated
//! on `IDEMGATE_TEST_REDIS_URL` (e.g. `redis://127.0.0.1:6379`).
//!
//! Every case gets a key prefix of its own (`idemgate-test:<unix secs>:<random>:`), so runs
//! never collide, and deletes the keys it created when it ends ([`common::TestStore`]).
//! Damaged records are made with raw `HSET`/`HDEL` ([`common::damage`]). Redis expires
//! records itself (`PEXPIREAT`), so `purge_in_batches` runs with `native_expiry`: expired
//! records read as absent and purge returns 0.

mod common;

async fn make() -> Option<common::TestStore> {
    common::fresh_store().await
}

idemgate_core::store_conformance!(
    make,
    common::damage,
    idemgate_core::testing::StoreCapabilities {
        native_expiry: true
    }
);

idemgate_core::admin_conformance!(
    make,
    common::damage,
    idemgate_core::testing::StoreCapabilities {
        native_expiry: true
    }
);
