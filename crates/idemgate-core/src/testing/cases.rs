//! The conformance cases of the store primitives.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::record::{LeaseToken, RecordState, ScopedKey, StoredResponse};
use crate::store::{IdempotencyStore, InsertOutcome, StoreError};

use super::{
    existing, fp, insert, inserted, request, response, unique_key, DAY, LONG, SHORT_LEASE,
    TINY_LEASE,
};

/// Past the short lease, with margin for the store's clock.
const PAST_SHORT_LEASE: Duration = Duration::from_millis(450);

fn lost<T: std::fmt::Debug>(r: Result<T, StoreError>) {
    assert!(
        matches!(r, Err(StoreError::LeaseLost)),
        "expected LeaseLost, got {r:?}"
    );
}

/// First insert creates `in_progress` under the lease; a second finds it, untouched.
pub async fn fresh_insert<S: IdempotencyStore>(s: S) {
    let k = unique_key("alice");
    let lease = insert(&s, &k, fp(1)).await;
    assert_eq!(lease.key, k);
    let rec = s.get(&k).await.unwrap().expect("record stored");
    assert_eq!(
        (rec.state, rec.fingerprint, rec.fence),
        (RecordState::InProgress, fp(1), lease.fence)
    );
    assert_eq!(
        (rec.lease_token, rec.lease_expires_at),
        (Some(lease.token), Some(lease.expires_at))
    );
    assert!(rec.expires_at >= rec.created_at + DAY.as_millis() as i64);
    // another fingerprint finds the record too: the store never judges fingerprints
    let (rec, now) = existing(
        s.insert_or_get(&request(&k, fp(2), LONG, DAY))
            .await
            .unwrap(),
    );
    assert_eq!(
        (rec.fingerprint, rec.lease_token),
        (fp(1), Some(lease.token))
    );
    assert!(now < rec.lease_expires_at.unwrap());
}

/// 32 concurrent inserts of one key: exactly one winner.
pub async fn concurrent_inserts_have_one_winner<S: IdempotencyStore>(s: S) {
    let s = Arc::new(s);
    let k = unique_key("alice");
    assert_eq!(race_inserts(&s, &k, 32).await, 1);
}

async fn race_inserts<S: IdempotencyStore>(s: &Arc<S>, k: &ScopedKey, n: usize) -> usize {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (s, k) = (s.clone(), k.clone());
            tokio::spawn(async move { s.insert_or_get(&request(&k, fp(1), LONG, DAY)).await })
        })
        .collect();
    let mut winners = 0;
    for t in tasks {
        winners += usize::from(matches!(
            t.await.unwrap().unwrap(),
            InsertOutcome::Inserted(_)
        ));
    }
    winners
}

/// Complete stores the response byte for byte (1 MiB binary body); a second complete with
/// the same lease is refused.
pub async fn complete_then_replay<S: IdempotencyStore>(s: S) {
    let k = unique_key("alice");
    let lease = insert(&s, &k, fp(1)).await;
    let resp = response(1 << 20);
    s.complete(&lease, &resp).await.unwrap();
    let (rec, _) = existing(
        s.insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    assert_eq!(rec.state, RecordState::Completed);
    assert_eq!(rec.response.as_ref(), Some(&resp));
    assert!(rec.completed_at.is_some());
    assert_eq!((rec.lease_token, rec.lease_expires_at), (None, None));
    lost(s.complete(&lease, &resp).await);
}

/// A not-replayable completion (a `304` too) and an empty replayable body keep their form.
pub async fn not_replayable_is_kept<S: IdempotencyStore>(s: S) {
    for (status, replayable) in [(201, false), (201, true), (304, false)] {
        let k = unique_key("alice");
        let lease = insert(&s, &k, fp(1)).await;
        let resp = StoredResponse {
            status,
            body: Bytes::new(),
            replayable,
            ..response(0)
        };
        s.complete(&lease, &resp).await.unwrap();
        let rec = s.get(&k).await.unwrap().unwrap();
        assert_eq!(rec.response, Some(resp));
    }
}

/// A take-over of a lapsed lease gets fence + 1; every write of the stale holder is refused.
pub async fn takeover_and_stale_fence<S: IdempotencyStore>(s: S) {
    let k = unique_key("alice");
    let old = inserted(
        s.insert_or_get(&request(&k, fp(1), SHORT_LEASE, DAY))
            .await
            .unwrap(),
    );
    tokio::time::sleep(PAST_SHORT_LEASE).await;
    let (seen, now) = existing(
        s.insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    assert!(
        now >= seen.lease_expires_at.unwrap(),
        "lease lapsed by the store clock"
    );
    let new = s
        .take_over(&seen, LeaseToken::random(), LONG)
        .await
        .unwrap()
        .expect("taken over");
    assert_eq!(new.fence, old.fence + 1, "fence grows on takeover");
    lost(s.renew(&old, LONG).await);
    lost(s.complete(&old, &response(3)).await);
    lost(s.fail(&old).await);
    lost(s.release(&old).await);
    let rec = s.get(&k).await.unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.fence, rec.lease_token),
        (RecordState::InProgress, new.fence, Some(new.token))
    );
    assert_eq!(
        (rec.created_at, rec.fingerprint),
        (seen.created_at, seen.fingerprint)
    );
    s.complete(&new, &response(3)).await.unwrap();
    assert_eq!(
        s.get(&k).await.unwrap().unwrap().state,
        RecordState::Completed
    );
}

/// A take-over on a snapshot that no longer matches (renewed, completed, taken over,
/// released) is refused and changes nothing.
pub async fn take_over_refuses_a_stale_snapshot<S: IdempotencyStore>(s: S) {
    let k = unique_key("alice");
    let lease = insert(&s, &k, fp(1)).await;
    let seen = s.get(&k).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await; // a renewal moves the expiry
    s.renew(&lease, LONG).await.unwrap();
    assert!(
        s.take_over(&seen, LeaseToken::random(), LONG)
            .await
            .unwrap()
            .is_none(),
        "renewed"
    );
    let fresh = s.get(&k).await.unwrap().unwrap();
    let winner = s
        .take_over(&fresh, LeaseToken::random(), LONG)
        .await
        .unwrap()
        .expect("current snapshot");
    assert!(
        s.take_over(&fresh, LeaseToken::random(), LONG)
            .await
            .unwrap()
            .is_none(),
        "taken over"
    );
    s.complete(&winner, &response(1)).await.unwrap();
    assert!(
        s.take_over(&fresh, LeaseToken::random(), LONG)
            .await
            .unwrap()
            .is_none(),
        "completed"
    );
    let rec = s.get(&k).await.unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.fence),
        (RecordState::Completed, winner.fence)
    );
    let k2 = unique_key("alice");
    let lease = insert(&s, &k2, fp(1)).await;
    let seen = s.get(&k2).await.unwrap().unwrap();
    s.release(&lease).await.unwrap();
    assert!(
        s.take_over(&seen, LeaseToken::random(), LONG)
            .await
            .unwrap()
            .is_none(),
        "released"
    );
    assert!(s.get(&k2).await.unwrap().is_none());
}

/// A holder whose lease lapsed (nobody took over) still records its outcome: the fence is
/// what counts, so a live holder that lost the store for a while is never refused.
pub async fn late_outcome_after_lapse_lands<S: IdempotencyStore>(s: S) {
    let k = unique_key("alice");
    let lease = inserted(
        s.insert_or_get(&request(&k, fp(1), SHORT_LEASE, DAY))
            .await
            .unwrap(),
    );
    tokio::time::sleep(PAST_SHORT_LEASE).await;
    s.renew(&lease, SHORT_LEASE).await.unwrap();
    tokio::time::sleep(PAST_SHORT_LEASE).await;
    s.complete(&lease, &response(5)).await.unwrap();
    assert_eq!(
        s.get(&k).await.unwrap().unwrap().response,
        Some(response(5))
    );
}

/// Renewal moves the lease expiry forward (so a snapshot read before it is stale).
pub async fn renewal_keeps_the_snapshot_fresh<S: IdempotencyStore>(s: S) {
    let k = unique_key("alice");
    let lease = inserted(
        s.insert_or_get(&request(&k, fp(1), SHORT_LEASE, DAY))
            .await
            .unwrap(),
    );
    for _ in 0..4 {
        tokio::time::sleep(SHORT_LEASE / 3).await;
        let until = s.renew(&lease, SHORT_LEASE).await.unwrap();
        assert!(until >= lease.expires_at);
        let (rec, now) = existing(
            s.insert_or_get(&request(&k, fp(1), LONG, DAY))
                .await
                .unwrap(),
        );
        assert_eq!(rec.lease_expires_at, Some(until));
        assert!(now < until, "renewed lease is live");
    }
    s.complete(&lease, &response(1)).await.unwrap();
}

/// Concurrent take-overs of one snapshot, and concurrent inserts over an expired record:
/// exactly one winner each time.
pub async fn concurrent_takeover_has_one_winner<S: IdempotencyStore>(s: S) {
    let s = Arc::new(s);
    let k = unique_key("alice");
    inserted(
        s.insert_or_get(&request(&k, fp(1), SHORT_LEASE, DAY))
            .await
            .unwrap(),
    );
    tokio::time::sleep(PAST_SHORT_LEASE).await;
    let seen = Arc::new(s.get(&k).await.unwrap().unwrap());
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (s, seen) = (s.clone(), seen.clone());
            tokio::spawn(async move { s.take_over(&seen, LeaseToken::random(), LONG).await })
        })
        .collect();
    let mut winners = 0;
    for t in tasks {
        winners += usize::from(t.await.unwrap().unwrap().is_some());
    }
    assert_eq!(winners, 1, "one takeover");

    let k = unique_key("alice");
    let ttl = Duration::from_millis(300);
    let lease = inserted(
        s.insert_or_get(&request(&k, fp(1), TINY_LEASE, ttl))
            .await
            .unwrap(),
    );
    s.complete(&lease, &response(1)).await.unwrap();
    tokio::time::sleep(ttl + Duration::from_millis(150)).await;
    assert_eq!(
        race_inserts(&s, &k, 16).await,
        1,
        "one re-insert after expiry"
    );
}

/// Fail marks the record failed; a take-over of the failed snapshot (the engine's call when
/// the route allows retries) gets fence + 1.
pub async fn fail_then_take_over<S: IdempotencyStore>(s: S) {
    let k = unique_key("alice");
    let lease = insert(&s, &k, fp(1)).await;
    s.fail(&lease).await.unwrap();
    let (rec, _) = existing(
        s.insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    assert_eq!((rec.state, rec.lease_token), (RecordState::Failed, None));
    let again = s
        .take_over(&rec, LeaseToken::random(), LONG)
        .await
        .unwrap()
        .expect("taken over");
    assert_eq!(again.fence, lease.fence + 1);
    assert_eq!(
        s.get(&k).await.unwrap().unwrap().state,
        RecordState::InProgress
    );
}

/// Release deletes the record so the same key inserts again; a released lease is stale.
pub async fn release_allows_retry<S: IdempotencyStore>(s: S) {
    let k = unique_key("alice");
    let lease = insert(&s, &k, fp(1)).await;
    s.release(&lease).await.unwrap();
    assert!(s.get(&k).await.unwrap().is_none());
    let second = insert(&s, &k, fp(1)).await;
    // the first holder cannot touch the new record, even if fences coincide
    lost(s.complete(&lease, &response(1)).await);
    lost(s.release(&lease).await);
    s.complete(&second, &response(1)).await.unwrap();
}

/// (principal, route, key) is the scope: other principals and routes are other records.
pub async fn scope_isolates_records<S: IdempotencyStore>(s: S) {
    let k = unique_key("alice");
    let lease = insert(&s, &k, fp(1)).await;
    s.complete(&lease, &response(1)).await.unwrap();
    insert(
        &s,
        &ScopedKey {
            principal: "bob".into(),
            ..k.clone()
        },
        fp(1),
    )
    .await;
    insert(
        &s,
        &ScopedKey {
            route: "POST /refunds".into(),
            ..k.clone()
        },
        fp(1),
    )
    .await;
}
