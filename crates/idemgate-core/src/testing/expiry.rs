//! The conformance cases of expiry: TTL, renewal past it, purge.

use std::num::NonZeroU32;
use std::time::Duration;

use crate::store::IdempotencyStore;

use super::{
    existing, fp, insert, inserted, request, response, unique_key, StoreCapabilities, DAY, LONG,
    SHORT_LEASE, TINY_LEASE,
};

fn lost<T: std::fmt::Debug>(r: Result<T, crate::store::StoreError>) {
    assert!(
        matches!(r, Err(crate::store::StoreError::LeaseLost)),
        "expected LeaseLost, got {r:?}"
    );
}

/// A holder that renews past the record's TTL keeps its record: it never expires under a
/// live lease, so no retry can run while the holder still works.
pub async fn renewal_outlives_record_ttl<S: IdempotencyStore>(s: S) {
    let k = unique_key("alice");
    let ttl = Duration::from_millis(300);
    let lease = inserted(
        s.insert_or_get(&request(&k, fp(1), SHORT_LEASE, ttl))
            .await
            .unwrap(),
    );
    for _ in 0..4 {
        tokio::time::sleep(SHORT_LEASE / 3).await;
        s.renew(&lease, SHORT_LEASE).await.unwrap();
    }
    assert!(
        s.get(&k).await.unwrap().is_some(),
        "record alive under a live lease"
    );
    existing(
        s.insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    s.complete(&lease, &response(1)).await.unwrap();
}

/// A record past its TTL reads as absent and is inserted anew with a higher fence.
pub async fn expired_ttl_counts_as_absent<S: IdempotencyStore>(s: S) {
    let k = unique_key("alice");
    let ttl = Duration::from_millis(300);
    let lease = inserted(
        s.insert_or_get(&request(&k, fp(1), TINY_LEASE, ttl))
            .await
            .unwrap(),
    );
    s.complete(&lease, &response(1)).await.unwrap();
    tokio::time::sleep(ttl + Duration::from_millis(150)).await;
    assert!(s.get(&k).await.unwrap().is_none());
    let again = insert(&s, &k, fp(2)).await;
    lost(s.complete(&lease, &response(1)).await);
    s.complete(&again, &response(2)).await.unwrap();
    assert_eq!(s.get(&k).await.unwrap().unwrap().fingerprint, fp(2));
}

/// Purge deletes expired records in bounded batches and leaves live ones.
pub async fn purge_in_batches<S: IdempotencyStore>(s: S) {
    purge_in_batches_with(s, StoreCapabilities::default()).await;
}

/// [`purge_in_batches`] for a backend with the given capabilities: under native expiry,
/// Redis has already deleted the expired records and purge returns 0.
pub async fn purge_in_batches_with<S: IdempotencyStore>(s: S, caps: StoreCapabilities) {
    let ttl = Duration::from_millis(200);
    let live = unique_key("alice");
    insert(&s, &live, fp(1)).await;
    let mut expired = Vec::new();
    for _ in 0..7 {
        let k = unique_key("alice");
        let lease = inserted(
            s.insert_or_get(&request(&k, fp(1), TINY_LEASE, ttl))
                .await
                .unwrap(),
        );
        s.complete(&lease, &response(10)).await.unwrap();
        expired.push(k);
    }
    tokio::time::sleep(ttl + Duration::from_millis(150)).await;
    for k in &expired {
        assert!(
            s.get(k).await.unwrap().is_none(),
            "expired records read as absent"
        );
    }
    let batch = NonZeroU32::new(3).unwrap();
    let counts: &[u64] = if caps.native_expiry {
        &[0]
    } else {
        &[3, 3, 1, 0]
    };
    for want in counts {
        assert_eq!(s.purge_expired(batch).await.unwrap(), *want);
    }
    assert!(s.get(&live).await.unwrap().is_some());
}

/// A record re-inserted after its TTL is live again: purge never deletes it.
pub async fn purge_spares_reacquired<S: IdempotencyStore>(s: S) {
    let ttl = Duration::from_millis(200);
    let k = unique_key("alice");
    let lease = inserted(
        s.insert_or_get(&request(&k, fp(1), TINY_LEASE, ttl))
            .await
            .unwrap(),
    );
    s.complete(&lease, &response(1)).await.unwrap();
    tokio::time::sleep(ttl + Duration::from_millis(150)).await;
    let again = insert(&s, &k, fp(1)).await;
    while s
        .purge_expired(NonZeroU32::new(100).unwrap())
        .await
        .unwrap()
        > 0
    {}
    let rec = s
        .get(&k)
        .await
        .unwrap()
        .expect("re-inserted record survives purge");
    assert_eq!(rec.fence, again.fence);
    s.complete(&again, &response(1)).await.unwrap();
}
