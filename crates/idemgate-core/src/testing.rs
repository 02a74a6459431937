//! The store conformance suite: every backend runs the same cases.
//!
//! In a store crate's tests:
//! ```text
//! idemgate_core::store_conformance!(my_crate_tests::make_store);
//! ```
//! where `make_store` is an `async fn() -> Option<impl IdempotencyStore>` that returns a store with
//! its own namespace (table, schema or key prefix) for each call: the purge cases count every
//! expired record the store holds, so cases must not share one. Each case becomes
//! one `#[tokio::test]`. Lease and TTL expiry use short real durations, because SQL and Redis
//! stores judge time by their own clock.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::engine::{decide, Decision, DecisionPolicy};
use crate::fingerprint::{Fingerprint, CURRENT_VERSION};
use crate::key::IdempotencyKey;
use crate::record::{Lease, LeaseToken, RecordState, ScopedKey, StoredResponse};
use crate::store::{AcquireOutcome, AcquireRequest, IdempotencyStore, StoreError};

/// A key unique to this process and call.
pub fn unique_key(principal: &str) -> ScopedKey {
    ScopedKey {
        principal: principal.to_owned(),
        route: "POST /payments".to_owned(),
        key: IdempotencyKey::new(&format!("key-{:016x}", rand::random::<u64>())).unwrap(),
    }
}

/// A fingerprint whose digest is `n` repeated.
pub fn fp(n: u8) -> Fingerprint {
    Fingerprint {
        version: CURRENT_VERSION,
        digest: [n; 32],
    }
}

/// An acquire request with a fresh token and the given lease and record TTLs.
pub fn request(key: &ScopedKey, f: Fingerprint, lease: Duration, ttl: Duration) -> AcquireRequest {
    AcquireRequest {
        key: key.clone(),
        fingerprint: f,
        token: LeaseToken::random(),
        lease_ttl: lease,
        record_ttl: ttl,
        policy: DecisionPolicy::default(),
    }
}

const LONG: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(86_400);
const SHORT_LEASE: Duration = Duration::from_millis(300);
/// A lease shorter than the short TTLs below: a record never expires under a live lease.
const TINY_LEASE: Duration = Duration::from_millis(100);

fn acquired(o: AcquireOutcome) -> (Lease, bool) {
    match o {
        AcquireOutcome::Acquired { lease, takeover } => (lease, takeover),
        AcquireOutcome::Existing { record, .. } => panic!("expected Acquired, got {record:?}"),
    }
}

fn existing(o: AcquireOutcome) -> (crate::IdempotencyRecord, i64) {
    match o {
        AcquireOutcome::Existing { record, now } => (record, now),
        AcquireOutcome::Acquired { lease, .. } => panic!("expected Existing, got {lease:?}"),
    }
}

/// A response with a binary body of `len` bytes and a non-UTF-8 header value.
pub fn response(len: usize) -> StoredResponse {
    StoredResponse {
        status: 201,
        headers: vec![
            (
                "content-type".into(),
                Bytes::from_static(b"application/json"),
            ),
            ("location".into(), Bytes::from_static(b"/payments/1")),
            ("x-raw".into(), Bytes::from_static(b"\xff\x00\x80")),
        ],
        body: (0..len).map(|i| (i * 31 % 256) as u8).collect(),
        replayable: true,
    }
}

/// First acquire inserts `in_progress`; a second sees it in flight.
pub async fn fresh_acquire<S: IdempotencyStore>(s: S) {
    let k = unique_key("alice");
    let (lease, takeover) = acquired(s.acquire(&request(&k, fp(1), LONG, DAY)).await.unwrap());
    assert!(!takeover);
    assert_eq!(lease.key, k);
    let rec = s.get(&k).await.unwrap().expect("record stored");
    assert_eq!(rec.state, RecordState::InProgress);
    assert_eq!(rec.fingerprint, fp(1));
    assert_eq!(rec.fence, lease.fence);
    let (rec, now) = existing(s.acquire(&request(&k, fp(1), LONG, DAY)).await.unwrap());
    assert!(matches!(
        decide(Some(&rec), &fp(1), now, &DecisionPolicy::default()),
        Decision::InFlight { .. }
    ));
}

/// 32 concurrent acquires of one key: exactly one winner.
pub async fn concurrent_acquires_have_one_winner<S: IdempotencyStore>(s: S) {
    let s = Arc::new(s);
    let k = unique_key("alice");
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (s, k) = (s.clone(), k.clone());
            tokio::spawn(async move { s.acquire(&request(&k, fp(1), LONG, DAY)).await })
        })
        .collect();
    let mut winners = 0;
    for t in tasks {
        if let AcquireOutcome::Acquired { .. } = t.await.unwrap().unwrap() {
            winners += 1;
        }
    }
    assert_eq!(winners, 1);
}

/// Complete stores the response byte for byte (1 MiB binary body); retries see it.
pub async fn complete_then_replay<S: IdempotencyStore>(s: S) {
    let k = unique_key("alice");
    let (lease, _) = acquired(s.acquire(&request(&k, fp(1), LONG, DAY)).await.unwrap());
    let resp = response(1 << 20);
    s.complete(&lease, &resp).await.unwrap();
    let (rec, now) = existing(s.acquire(&request(&k, fp(1), LONG, DAY)).await.unwrap());
    assert_eq!(rec.state, RecordState::Completed);
    assert_eq!(rec.response.as_ref(), Some(&resp));
    assert!(rec.completed_at.is_some());
    let policy = DecisionPolicy::default();
    assert_eq!(decide(Some(&rec), &fp(1), now, &policy), Decision::Replay);
    assert_eq!(decide(Some(&rec), &fp(2), now, &policy), Decision::Mismatch);
    // a second complete with the same lease is refused: the record is no longer in progress
    assert!(matches!(
        s.complete(&lease, &resp).await,
        Err(StoreError::LeaseLost)
    ));
}

/// A not-replayable completion keeps that flag.
pub async fn not_replayable_is_kept<S: IdempotencyStore>(s: S) {
    let k = unique_key("alice");
    let (lease, _) = acquired(s.acquire(&request(&k, fp(1), LONG, DAY)).await.unwrap());
    let resp = StoredResponse {
        body: Bytes::new(),
        replayable: false,
        ..response(0)
    };
    s.complete(&lease, &resp).await.unwrap();
    let (rec, now) = existing(s.acquire(&request(&k, fp(1), LONG, DAY)).await.unwrap());
    assert_eq!(rec.response.as_ref().map(|r| r.replayable), Some(false));
    assert_eq!(
        decide(Some(&rec), &fp(1), now, &DecisionPolicy::default()),
        Decision::NotReplayable
    );
}

/// After the lease expires, the same fingerprint takes over with a higher fence, and every
/// write of the stale holder is refused.
pub async fn takeover_and_stale_fence<S: IdempotencyStore>(s: S) {
    let k = unique_key("alice");
    let (old, _) = acquired(
        s.acquire(&request(&k, fp(1), SHORT_LEASE, DAY))
            .await
            .unwrap(),
    );
    // still held: no takeover
    existing(
        s.acquire(&request(&k, fp(1), SHORT_LEASE, DAY))
            .await
            .unwrap(),
    );
    tokio::time::sleep(SHORT_LEASE + Duration::from_millis(150)).await;
    // a different fingerprint never takes over
    let (rec, now) = existing(s.acquire(&request(&k, fp(2), LONG, DAY)).await.unwrap());
    assert_eq!(
        decide(Some(&rec), &fp(2), now, &DecisionPolicy::default()),
        Decision::Mismatch
    );
    let (new, takeover) = acquired(s.acquire(&request(&k, fp(1), LONG, DAY)).await.unwrap());
    assert!(takeover);
    assert!(new.fence > old.fence, "fence grows on takeover");
    assert!(matches!(
        s.renew(&old, LONG).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        s.complete(&old, &response(3)).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(s.fail(&old).await, Err(StoreError::LeaseLost)));
    assert!(matches!(s.release(&old).await, Err(StoreError::LeaseLost)));
    let rec = s.get(&k).await.unwrap().unwrap();
    assert_eq!((rec.state, rec.fence), (RecordState::InProgress, new.fence));
    s.complete(&new, &response(3)).await.unwrap();
    assert_eq!(
        s.get(&k).await.unwrap().unwrap().state,
        RecordState::Completed
    );
}

/// Renewal keeps a slow holder's record from being taken over.
pub async fn renewal_prevents_takeover<S: IdempotencyStore>(s: S) {
    let k = unique_key("alice");
    let (lease, _) = acquired(
        s.acquire(&request(&k, fp(1), SHORT_LEASE, DAY))
            .await
            .unwrap(),
    );
    for _ in 0..4 {
        tokio::time::sleep(SHORT_LEASE / 3).await;
        let until = s.renew(&lease, SHORT_LEASE).await.unwrap();
        assert!(until >= lease.expires_at);
    }
    // 400 ms after acquire, past the first lease: still held thanks to renewal
    existing(s.acquire(&request(&k, fp(1), LONG, DAY)).await.unwrap());
    s.complete(&lease, &response(1)).await.unwrap();
}

/// A holder that renews past the record's TTL keeps its record: it never expires under a
/// live lease, so no retry can run while the holder still works.
pub async fn renewal_outlives_record_ttl<S: IdempotencyStore>(s: S) {
    let k = unique_key("alice");
    let ttl = Duration::from_millis(300);
    let (lease, _) = acquired(
        s.acquire(&request(&k, fp(1), SHORT_LEASE, ttl))
            .await
            .unwrap(),
    );
    for _ in 0..4 {
        tokio::time::sleep(SHORT_LEASE / 3).await;
        s.renew(&lease, SHORT_LEASE).await.unwrap();
    }
    // 400 ms after acquire: past the record's TTL, within the renewed lease
    assert!(
        s.get(&k).await.unwrap().is_some(),
        "record alive under a live lease"
    );
    existing(s.acquire(&request(&k, fp(1), LONG, DAY)).await.unwrap());
    s.complete(&lease, &response(1)).await.unwrap();
}

/// Concurrent takeovers of an expired lease, and concurrent re-acquires of an expired
/// record: exactly one winner each time.
pub async fn concurrent_takeover_has_one_winner<S: IdempotencyStore>(s: S) {
    let s = Arc::new(s);
    let race = |k: ScopedKey, lease: Duration, ttl: Duration| {
        let s = s.clone();
        async move {
            let tasks: Vec<_> = (0..16)
                .map(|_| {
                    let (s, k) = (s.clone(), k.clone());
                    tokio::spawn(async move { s.acquire(&request(&k, fp(1), lease, ttl)).await })
                })
                .collect();
            let mut winners = 0;
            for t in tasks {
                if let AcquireOutcome::Acquired { .. } = t.await.unwrap().unwrap() {
                    winners += 1;
                }
            }
            winners
        }
    };
    let k = unique_key("alice");
    acquired(
        s.acquire(&request(&k, fp(1), SHORT_LEASE, DAY))
            .await
            .unwrap(),
    );
    tokio::time::sleep(SHORT_LEASE + Duration::from_millis(150)).await;
    assert_eq!(race(k, LONG, DAY).await, 1, "one takeover");

    let k = unique_key("alice");
    let ttl = Duration::from_millis(300);
    let (lease, _) = acquired(
        s.acquire(&request(&k, fp(1), TINY_LEASE, ttl))
            .await
            .unwrap(),
    );
    s.complete(&lease, &response(1)).await.unwrap();
    tokio::time::sleep(ttl + Duration::from_millis(150)).await;
    assert_eq!(race(k, LONG, DAY).await, 1, "one re-acquire after expiry");
}

/// Fail marks the record failed; retries are refused unless the policy allows them.
pub async fn fail_then_refuse_or_retry<S: IdempotencyStore>(s: S) {
    let k = unique_key("alice");
    let (lease, _) = acquired(s.acquire(&request(&k, fp(1), LONG, DAY)).await.unwrap());
    s.fail(&lease).await.unwrap();
    let (rec, now) = existing(s.acquire(&request(&k, fp(1), LONG, DAY)).await.unwrap());
    assert_eq!(rec.state, RecordState::Failed);
    assert_eq!(
        decide(Some(&rec), &fp(1), now, &DecisionPolicy::default()),
        Decision::PreviousFailed
    );
    let mut retry = request(&k, fp(1), LONG, DAY);
    retry.policy.retry_failed = true;
    let (again, takeover) = acquired(s.acquire(&retry).await.unwrap());
    assert!(takeover && again.fence > lease.fence);
}

/// Release deletes the record so the same key runs again; a released lease is stale.
pub async fn release_allows_retry<S: IdempotencyStore>(s: S) {
    let k = unique_key("alice");
    let (lease, _) = acquired(s.acquire(&request(&k, fp(1), LONG, DAY)).await.unwrap());
    s.release(&lease).await.unwrap();
    assert!(s.get(&k).await.unwrap().is_none());
    let (second, takeover) = acquired(s.acquire(&request(&k, fp(1), LONG, DAY)).await.unwrap());
    assert!(!takeover);
    // the first holder cannot touch the new record, even if fences coincide
    assert!(matches!(
        s.complete(&lease, &response(1)).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        s.release(&lease).await,
        Err(StoreError::LeaseLost)
    ));
    s.complete(&second, &response(1)).await.unwrap();
}

/// (principal, route, key) is the scope: other principals and routes are other records.
pub async fn scope_isolates_records<S: IdempotencyStore>(s: S) {
    let k = unique_key("alice");
    let (lease, _) = acquired(s.acquire(&request(&k, fp(1), LONG, DAY)).await.unwrap());
    s.complete(&lease, &response(1)).await.unwrap();
    let bob = ScopedKey {
        principal: "bob".into(),
        ..k.clone()
    };
    acquired(s.acquire(&request(&bob, fp(1), LONG, DAY)).await.unwrap());
    let refunds = ScopedKey {
        route: "POST /refunds".into(),
        ..k.clone()
    };
    acquired(
        s.acquire(&request(&refunds, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
}

/// A record past its TTL reads as absent and is acquired anew.
pub async fn expired_ttl_counts_as_absent<S: IdempotencyStore>(s: S) {
    let k = unique_key("alice");
    let ttl = Duration::from_millis(300);
    let (lease, _) = acquired(
        s.acquire(&request(&k, fp(1), TINY_LEASE, ttl))
            .await
            .unwrap(),
    );
    s.complete(&lease, &response(1)).await.unwrap();
    tokio::time::sleep(ttl + Duration::from_millis(150)).await;
    assert!(s.get(&k).await.unwrap().is_none());
    let (again, takeover) = acquired(s.acquire(&request(&k, fp(2), LONG, DAY)).await.unwrap());
    assert!(!takeover);
    assert!(matches!(
        s.complete(&lease, &response(1)).await,
        Err(StoreError::LeaseLost)
    ));
    s.complete(&again, &response(2)).await.unwrap();
}

/// What a backend does by itself that changes what the suite can observe. Pass it as the
/// second argument of [`crate::store_conformance!`]; the default is "nothing special".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreCapabilities {
    /// The backend deletes each record at its `expires_at` by itself (Redis `PEXPIREAT`),
    /// so `purge_expired` never finds anything and returns 0. The purge case then checks
    /// that expired records read as absent, that purge returns 0 and that live records
    /// survive, instead of counting deletions.
    pub native_expiry: bool,
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
    acquired(s.acquire(&request(&live, fp(1), LONG, DAY)).await.unwrap());
    let mut expired = Vec::new();
    for _ in 0..7 {
        let k = unique_key("alice");
        let (lease, _) = acquired(
            s.acquire(&request(&k, fp(1), TINY_LEASE, ttl))
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
    if caps.native_expiry {
        assert_eq!(s.purge_expired(batch).await.unwrap(), 0);
    } else {
        assert_eq!(s.purge_expired(batch).await.unwrap(), 3);
        assert_eq!(s.purge_expired(batch).await.unwrap(), 3);
        assert_eq!(s.purge_expired(batch).await.unwrap(), 1);
        assert_eq!(s.purge_expired(batch).await.unwrap(), 0);
    }
    assert!(s.get(&live).await.unwrap().is_some());
}

/// A record re-acquired after its TTL is live again: purge never deletes it.
pub async fn purge_spares_reacquired<S: IdempotencyStore>(s: S) {
    let ttl = Duration::from_millis(200);
    let k = unique_key("alice");
    let (lease, _) = acquired(
        s.acquire(&request(&k, fp(1), TINY_LEASE, ttl))
            .await
            .unwrap(),
    );
    s.complete(&lease, &response(1)).await.unwrap();
    tokio::time::sleep(ttl + Duration::from_millis(150)).await;
    let (again, _) = acquired(s.acquire(&request(&k, fp(1), LONG, DAY)).await.unwrap());
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
        .expect("re-acquired record survives purge");
    assert_eq!(rec.fence, again.fence);
    s.complete(&again, &response(1)).await.unwrap();
}

/// Expands to one `#[tokio::test]` per conformance case, each with a fresh store from
/// `$make` (an `async fn() -> Option<impl IdempotencyStore>`; `None` skips the case, after the maker printed why).
/// An optional second argument, a [`StoreCapabilities`](crate::testing::StoreCapabilities)
/// expression, says what the backend does by itself (e.g. native expiry).
#[macro_export]
macro_rules! store_conformance {
    ($make:path) => {
        $crate::store_conformance!($make, $crate::testing::StoreCapabilities::default());
    };
    ($make:path, $caps:expr) => {
        $crate::store_conformance!(@cases $make;
            fresh_acquire, concurrent_acquires_have_one_winner, complete_then_replay,
            not_replayable_is_kept, takeover_and_stale_fence, renewal_prevents_takeover,
            renewal_outlives_record_ttl, concurrent_takeover_has_one_winner,
            fail_then_refuse_or_retry, release_allows_retry, scope_isolates_records,
            expired_ttl_counts_as_absent, purge_spares_reacquired);
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn purge_in_batches() {
            if let Some(store) = $make().await {
                $crate::testing::purge_in_batches_with(store, $caps).await;
            }
        }
    };
    (@cases $make:path; $($case:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                if let Some(store) = $make().await {
                    $crate::testing::$case(store).await;
                }
            }
        )*
    };
}
