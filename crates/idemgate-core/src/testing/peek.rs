//! The conformance case of the read ahead: [`IdempotencyStore::peek`] and
//! [`IdempotencyStore::insert_or_get_unseen`] agree with `insert_or_get`.

use std::time::Duration;

use crate::record::{RecordState, ScopedKey};
use crate::store::{IdempotencyStore, InsertOutcome, Peeked, StoreError};

use super::{existing, fp, inserted, request, response, unique_key, DAY, LONG, TINY_LEASE};

/// What `peek` found, with `NotRead` (a store that does not read ahead) told apart.
async fn peeked<S: IdempotencyStore>(s: &S, k: &ScopedKey) -> Peeked {
    s.peek(k).await.expect("peek")
}

/// A peek never finds a record that is not there, finds the live record `insert_or_get`
/// finds (in progress, then completed), and reads an expired one as absent; an insert
/// after a peek that saw nothing still finds a record written in between, and never
/// inserts a second one.
pub async fn peek_agrees_with_insert_or_get<S: IdempotencyStore>(s: S) {
    let k = unique_key("alice");
    let reads = match peeked(&s, &k).await {
        Peeked::NotRead => false,
        Peeked::Absent => true,
        Peeked::Live { record, .. } => panic!("a new key peeked as live: {record:?}"),
    };
    let lease = inserted(
        s.insert_or_get_unseen(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    // A second attempt whose peek saw nothing before the first inserted: found, not inserted.
    let (rec, _) = existing(
        s.insert_or_get_unseen(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    assert_eq!(
        (rec.fence, rec.lease_token),
        (lease.fence, Some(lease.token))
    );
    if reads {
        let Peeked::Live { record, now } = peeked(&s, &k).await else {
            panic!("an in-progress record did not peek as live");
        };
        assert_eq!(
            (record.state, record.fence),
            (RecordState::InProgress, lease.fence)
        );
        assert!(now < record.lease_expires_at.unwrap());
    }
    s.complete(&lease, &response(7)).await.unwrap();
    match peeked(&s, &k).await {
        Peeked::Live { record, .. } => {
            assert!(reads, "a store that peeks said NotRead first");
            assert_eq!(record.state, RecordState::Completed);
            assert_eq!(record.response, Some(response(7)));
        }
        Peeked::NotRead => assert!(!reads, "a store that peeks said NotRead"),
        Peeked::Absent => panic!("a completed record peeked as absent"),
    }
    // Past its TTL the record peeks as absent, and the insert replaces it.
    let short = unique_key("alice");
    let ttl = Duration::from_millis(300);
    let first = inserted(
        s.insert_or_get(&request(&short, fp(1), TINY_LEASE, ttl))
            .await
            .unwrap(),
    );
    s.complete(&first, &response(1)).await.unwrap();
    tokio::time::sleep(ttl + Duration::from_millis(150)).await;
    if reads {
        assert!(matches!(peeked(&s, &short).await, Peeked::Absent));
    }
    match s
        .insert_or_get_unseen(&request(&short, fp(2), LONG, DAY))
        .await
        .unwrap()
    {
        // The old lease is refused (a store with native expiry starts the fence over).
        InsertOutcome::Inserted(again) => {
            assert_ne!(again.token, first.token);
            let stale = s.complete(&first, &response(1)).await;
            assert!(matches!(stale, Err(StoreError::LeaseLost)), "{stale:?}");
        }
        InsertOutcome::Existing { record, .. } => panic!("an expired record was kept: {record:?}"),
    }
}
