//! Expiry is Redis' own: `PEXPIREAT` at `expires_at`, judged by the server clock.

use std::num::NonZeroU32;
use std::time::Duration;

use idemgate_core::testing::{existing, fp, inserted, request, response, unique_key};
use idemgate_core::{IdempotencyStore, LeaseToken, RecordState};
use redis::AsyncCommands;

use crate::{common, DAY, LONG};

/// A lease shorter than the short TTLs: a record never expires under a live lease.
const TINY_LEASE: Duration = Duration::from_millis(100);

async fn pexpiretime(raw: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME")
        .arg(key)
        .query_async(raw)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_key_expires_at_expires_at() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let mut raw = common::raw(&common::url().unwrap()).await;
    let k = unique_key("alice");
    let ttl = Duration::from_secs(3600);
    let lease = inserted(
        store
            .insert_or_get(&request(&k, fp(1), LONG, ttl))
            .await
            .unwrap(),
    );
    let rec = store.get(&k).await.unwrap().unwrap();
    let key = store.record_key(&k);
    let expire_time = pexpiretime(&mut raw, &key).await;
    assert_eq!(
        expire_time, rec.expires_at,
        "PEXPIREAT is the record's expires_at"
    );
    assert_eq!(rec.expires_at - rec.created_at, 3_600_000);
    // renew and complete keep the expiry
    store.renew(&lease, LONG).await.unwrap();
    store.complete(&lease, &response(1)).await.unwrap();
    let pttl: i64 = raw.pttl(&key).await.unwrap();
    assert!(pttl > 3_590_000 && pttl <= 3_600_000, "{pttl}");
    let kind: String = redis::cmd("TYPE")
        .arg(&key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(kind, "hash");
}

/// A record never expires under a live lease: insert, take-over and renew push the key's
/// expiry (and `expires_at`) to the lease's end when the TTL would end first.
#[tokio::test]
async fn the_key_never_expires_under_a_live_lease() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let mut raw = common::raw(&common::url().unwrap()).await;
    let k = unique_key("alice");
    let key = store.record_key(&k);
    let ttl = Duration::from_millis(100);
    let lease = inserted(
        store
            .insert_or_get(&request(&k, fp(1), LONG, ttl))
            .await
            .unwrap(),
    );
    assert_eq!(pexpiretime(&mut raw, &key).await, lease.expires_at);
    let until = store.renew(&lease, 2 * LONG).await.unwrap();
    assert_eq!(pexpiretime(&mut raw, &key).await, until);
    let rec = store.get(&k).await.unwrap().unwrap();
    assert_eq!(rec.expires_at, until);
    // a shorter renewal never shortens the record's life
    store.renew(&lease, TINY_LEASE).await.unwrap();
    assert_eq!(pexpiretime(&mut raw, &key).await, until);

    // takeover: the new lease's end, when later than the old expiry
    let k = unique_key("alice");
    let key = store.record_key(&k);
    let short_ttl = Duration::from_millis(400);
    inserted(
        store
            .insert_or_get(&request(&k, fp(1), TINY_LEASE, short_ttl))
            .await
            .unwrap(),
    );
    tokio::time::sleep(Duration::from_millis(150)).await;
    let (seen, _) = existing(
        store
            .insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    let new = store
        .take_over(&seen, LeaseToken::random(), LONG)
        .await
        .unwrap()
        .expect("taken over");
    assert_eq!(pexpiretime(&mut raw, &key).await, new.expires_at);
    assert_eq!(
        store.get(&k).await.unwrap().unwrap().expires_at,
        new.expires_at
    );
}

/// What `purge_in_batches` of the conformance suite checks, for a store whose expiry is
/// native: expired records read as absent and are gone from Redis, purge has nothing to
/// delete, live records stay.
#[tokio::test]
async fn purge_is_native() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let mut raw = common::raw(&common::url().unwrap()).await;
    let ttl = Duration::from_millis(200);
    let live = unique_key("alice");
    inserted(
        store
            .insert_or_get(&request(&live, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    let mut expired = Vec::new();
    for _ in 0..7 {
        let k = unique_key("alice");
        let lease = inserted(
            store
                .insert_or_get(&request(&k, fp(1), TINY_LEASE, ttl))
                .await
                .unwrap(),
        );
        store.complete(&lease, &response(10)).await.unwrap();
        expired.push(k);
    }
    tokio::time::sleep(ttl + Duration::from_millis(150)).await;
    for k in &expired {
        assert!(store.get(k).await.unwrap().is_none());
        let exists: bool = raw.exists(store.record_key(k)).await.unwrap();
        assert!(!exists, "Redis dropped the key itself");
    }
    assert_eq!(
        store
            .purge_expired(NonZeroU32::new(3).unwrap())
            .await
            .unwrap(),
        0
    );
    assert!(store.get(&live).await.unwrap().is_some());
}

/// The window between `expires_at` and Redis dropping the key (here: forever, after
/// `PERSIST`): the record still reads as absent, and insert-or-get inserts anew with
/// fence + 1.
#[tokio::test]
async fn an_expired_record_redis_still_holds_counts_as_absent() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let mut raw = common::raw(&common::url().unwrap()).await;
    let k = unique_key("alice");
    let lease = inserted(
        store
            .insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    store.complete(&lease, &response(1)).await.unwrap();
    let key = store.record_key(&k);
    let _: bool = raw.persist(&key).await.unwrap();
    let _: i64 = raw.hset(&key, "ex", 1_000).await.unwrap();
    assert!(store.get(&k).await.unwrap().is_none());
    // a different fingerprint is not a mismatch: the old record no longer counts
    let again = inserted(
        store
            .insert_or_get(&request(&k, fp(2), LONG, DAY))
            .await
            .unwrap(),
    );
    assert_eq!(again.fence, lease.fence + 1);
    let rec = store.get(&k).await.unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.fingerprint),
        (RecordState::InProgress, fp(2))
    );
    assert_eq!(rec.response, None, "nothing of the old record is left");
    let pttl: i64 = raw.pttl(&key).await.unwrap();
    assert!(pttl > 86_000_000, "the new record expires again: {pttl}");
    existing(
        store
            .insert_or_get(&request(&k, fp(2), LONG, DAY))
            .await
            .unwrap(),
    );
}
