//! The stored record: its fields, the lease rules of the acquire script, and records the
//! store cannot read.

use std::time::Duration;

use idemgate_core::engine::{decide, Decision, LeaseExpiredPolicy};
use idemgate_core::testing::{fp, request, response, unique_key};
use idemgate_core::{IdempotencyStore, RecordState, StoreError};
use redis::AsyncCommands;

use crate::{acquired, common, existing, DAY, LONG};

#[tokio::test]
async fn the_record_is_one_hash_under_the_prefix() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let mut raw = common::raw(&common::url().unwrap()).await;
    let k = unique_key("alice");
    let (lease, _) = acquired(store.acquire(&request(&k, fp(1), LONG, DAY)).await.unwrap());
    let key = store.record_key(&k);
    assert!(key.starts_with(store.key_prefix()));
    assert!(key[store.key_prefix().len()..].starts_with('{') && key.ends_with('}'));
    let fields: Vec<(String, Vec<u8>)> = raw.hgetall(&key).await.unwrap();
    let names: Vec<&str> = fields.iter().map(|(f, _)| f.as_str()).collect();
    for f in [
        "p", "r", "k", "fv", "fd", "st", "fe", "lt", "le", "ca", "ex",
    ] {
        assert!(names.contains(&f), "{f} in {names:?}");
    }
    store.complete(&lease, &response(64)).await.unwrap();
    let fields: Vec<(String, Vec<u8>)> = raw.hgetall(&key).await.unwrap();
    let names: Vec<&str> = fields.iter().map(|(f, _)| f.as_str()).collect();
    assert!(
        !names.contains(&"lt") && !names.contains(&"le"),
        "{names:?}"
    );
    for f in ["co", "rs", "rh", "rb", "rr"] {
        assert!(names.contains(&f), "{f} in {names:?}");
    }
}

/// DESIGN.md: a record whose lease is missing or unreadable counts as in progress until
/// `created_at` + the maximum lease, never as expired.
#[tokio::test]
async fn a_missing_lease_holds_until_created_at_plus_max_lease() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let mut raw = common::raw(&common::url().unwrap()).await;
    let k = unique_key("alice");
    let (old, _) = acquired(store.acquire(&request(&k, fp(1), LONG, DAY)).await.unwrap());
    let _: i64 = raw
        .hset(store.record_key(&k), "le", "garbage")
        .await
        .unwrap();
    let mut req = request(&k, fp(1), LONG, DAY);
    req.policy.max_lease = Duration::from_millis(400);
    let (rec, now) = existing(store.acquire(&req).await.unwrap());
    assert_eq!(rec.lease_expires_at, None);
    assert!(matches!(
        decide(Some(&rec), &fp(1), now, &req.policy),
        Decision::InFlight { .. }
    ));
    tokio::time::sleep(Duration::from_millis(450)).await;
    let (new, takeover) = acquired(store.acquire(&req).await.unwrap());
    assert!(takeover && new.fence == old.fence + 1);
}

#[tokio::test]
async fn lease_expired_policy_fail_never_takes_over() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let k = unique_key("alice");
    let short = Duration::from_millis(100);
    acquired(
        store
            .acquire(&request(&k, fp(1), short, DAY))
            .await
            .unwrap(),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut req = request(&k, fp(1), LONG, DAY);
    req.policy.lease_expired = LeaseExpiredPolicy::Fail;
    let (rec, now) = existing(store.acquire(&req).await.unwrap());
    assert_eq!(
        decide(Some(&rec), &fp(1), now, &req.policy),
        Decision::PreviousFailed
    );
    assert_eq!(
        rec.state,
        RecordState::InProgress,
        "the record is untouched"
    );
}

#[tokio::test]
async fn a_failed_retry_clears_the_old_outcome() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let k = unique_key("alice");
    let (first, _) = acquired(store.acquire(&request(&k, fp(1), LONG, DAY)).await.unwrap());
    store.fail(&first).await.unwrap();
    let failed = store.get(&k).await.unwrap().unwrap();
    assert!(failed.completed_at.is_some());
    let mut retry = request(&k, fp(1), LONG, DAY);
    retry.policy.retry_failed = true;
    let (second, takeover) = acquired(store.acquire(&retry).await.unwrap());
    assert!(takeover);
    let rec = store.get(&k).await.unwrap().unwrap();
    assert_eq!(rec.state, RecordState::InProgress);
    assert_eq!(rec.completed_at, None);
    assert_eq!(
        (rec.created_at, rec.expires_at),
        (failed.created_at, failed.expires_at)
    );
    assert_eq!(rec.lease_token, Some(second.token));
}

#[tokio::test]
async fn unreadable_records_are_corrupt_and_left_alone() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let mut raw = common::raw(&common::url().unwrap()).await;
    let k = unique_key("alice");
    let (lease, _) = acquired(store.acquire(&request(&k, fp(1), LONG, DAY)).await.unwrap());
    store.complete(&lease, &response(8)).await.unwrap();
    let key = store.record_key(&k);
    let _: i64 = raw.hset(&key, "st", "done").await.unwrap();
    for outcome in [
        store
            .acquire(&request(&k, fp(1), LONG, DAY))
            .await
            .map(drop),
        store.get(&k).await.map(drop),
    ] {
        assert!(
            matches!(&outcome, Err(StoreError::Corrupt { detail }) if detail.contains("done")),
            "{outcome:?}"
        );
    }
    let state: String = raw.hget(&key, "st").await.unwrap();
    assert_eq!(state, "done", "acquire did not overwrite it");

    // a key of another type
    let _: () = raw.del(&key).await.unwrap();
    let _: () = raw.set(&key, "not a hash").await.unwrap();
    let outcome = store.acquire(&request(&k, fp(1), LONG, DAY)).await;
    assert!(
        matches!(outcome, Err(StoreError::Corrupt { .. })),
        "{outcome:?}"
    );
    let _: () = raw.del(&key).await.unwrap();
}

/// The scope is stored in the record and compared: a record found under another scope's
/// key (which SHA-256 makes unreachable in practice) is never replayed.
#[tokio::test]
async fn a_record_of_another_scope_is_never_returned() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let mut raw = common::raw(&common::url().unwrap()).await;
    let alice = unique_key("alice");
    let (lease, _) = acquired(
        store
            .acquire(&request(&alice, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    store.complete(&lease, &response(8)).await.unwrap();
    let bob = idemgate_core::ScopedKey {
        principal: "bob".into(),
        ..alice.clone()
    };
    let _: () = raw
        .rename(store.record_key(&alice), store.record_key(&bob))
        .await
        .unwrap();
    assert!(matches!(
        store.get(&bob).await,
        Err(StoreError::Corrupt { .. })
    ));
    assert!(matches!(
        store.acquire(&request(&bob, fp(1), LONG, DAY)).await,
        Err(StoreError::Corrupt { .. })
    ));
    let _: () = raw.del(store.record_key(&bob)).await.unwrap();
}

#[tokio::test]
async fn prefixes_separate_stores() {
    let (Some(a), Some(b)) = (common::fresh_store().await, common::fresh_store().await) else {
        return;
    };
    let k = unique_key("alice");
    acquired(a.acquire(&request(&k, fp(1), LONG, DAY)).await.unwrap());
    acquired(b.acquire(&request(&k, fp(2), LONG, DAY)).await.unwrap());
    assert_ne!(a.record_key(&k), b.record_key(&k));
}
