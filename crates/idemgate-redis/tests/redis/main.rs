//! Redis-specific tests of [`idemgate_redis::RedisStore`] on one server, gated on
//! `IDEMGATE_TEST_REDIS_URL` (unset: each case prints why and passes as skipped). One
//! binary, one module per topic. Each case uses a key prefix of its own.

#[path = "../common/mod.rs"]
mod common;

mod errors;
mod expiry;
mod loss;
mod records;
mod server;

use std::time::Duration;

use idemgate_core::{AcquireOutcome, IdempotencyRecord, Lease, UnixMillis};

const LONG: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(86_400);

fn acquired(o: AcquireOutcome) -> (Lease, bool) {
    match o {
        AcquireOutcome::Acquired { lease, takeover } => (lease, takeover),
        AcquireOutcome::Existing { record, .. } => panic!("expected Acquired, got {record:?}"),
    }
}

fn existing(o: AcquireOutcome) -> (IdempotencyRecord, UnixMillis) {
    match o {
        AcquireOutcome::Existing { record, now } => (record, now),
        AcquireOutcome::Acquired { lease, .. } => panic!("expected Existing, got {lease:?}"),
    }
}
