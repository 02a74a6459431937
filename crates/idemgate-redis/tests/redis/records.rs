//! The stored record: its fields, what insert-or-get and take-over do to it, and records
//! the store cannot read.

use std::time::Duration;

use idemgate_core::testing::{existing, fp, inserted, request, response, unique_key};
use idemgate_core::{IdempotencyStore, LeaseToken, RecordState, StoreError};
use redis::AsyncCommands;

use crate::{common, DAY, LONG};

async fn field_names(raw: &mut redis::aio::MultiplexedConnection, key: &str) -> Vec<String> {
    let fields: Vec<(String, Vec<u8>)> = raw.hgetall(key).await.unwrap();
    fields.into_iter().map(|(f, _)| f).collect()
}

#[tokio::test]
async fn the_record_is_one_hash_under_the_prefix() {
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
    let key = store.record_key(&k);
    assert!(key.starts_with(store.key_prefix()));
    assert!(key[store.key_prefix().len()..].starts_with('{') && key.ends_with('}'));
    let names = field_names(&mut raw, &key).await;
    for f in [
        "p", "r", "k", "fv", "fd", "st", "fe", "lt", "le", "ca", "ex",
    ] {
        assert!(names.iter().any(|n| n == f), "{f} in {names:?}");
    }
    store.complete(&lease, &response(64)).await.unwrap();
    let names = field_names(&mut raw, &key).await;
    assert!(!names.iter().any(|n| n == "lt" || n == "le"), "{names:?}");
    for f in ["co", "rs", "rh", "rb", "rr", "cs"] {
        assert!(names.iter().any(|n| n == f), "{f} in {names:?}");
    }
    let checksum: Vec<u8> = raw.hget(&key, "cs").await.unwrap();
    assert_eq!(checksum.len(), 32, "the response checksum is stored raw");
}

/// DESIGN.md: a record whose lease is missing or unreadable counts as in progress until
/// `created_at` + the maximum lease. That rule is the engine's: the store reports the lease
/// as absent, keeps `created_at`, never replaces the record by itself however long it
/// waits, and a take-over of that snapshot (absent lease) is a plain compare-and-set.
#[tokio::test]
async fn a_missing_lease_reads_as_absent_and_only_a_take_over_replaces_it() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let mut raw = common::raw(&common::url().unwrap()).await;
    let k = unique_key("alice");
    let old = inserted(
        store
            .insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    let _: i64 = raw
        .hset(store.record_key(&k), "le", "garbage")
        .await
        .unwrap();
    let (rec, _) = existing(
        store
            .insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    assert_eq!(
        (rec.lease_expires_at, rec.lease_token),
        (None, Some(old.token))
    );
    tokio::time::sleep(Duration::from_millis(450)).await;
    let (seen, _) = existing(
        store
            .insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    assert_eq!(
        (seen.state, seen.fence),
        (RecordState::InProgress, old.fence)
    );
    assert_eq!(seen.created_at, rec.created_at);
    let new = store
        .take_over(&seen, LeaseToken::random(), LONG)
        .await
        .unwrap()
        .expect("the snapshot with an absent lease matches");
    assert_eq!(new.fence, old.fence + 1);
    let after = store.get(&k).await.unwrap().unwrap();
    assert_eq!(after.lease_expires_at, Some(new.expires_at));
}

/// A lease that lapsed is returned untouched, by the store's clock: taking over is the
/// engine's call (under the default policy it never is).
#[tokio::test]
async fn a_lapsed_lease_is_returned_untouched() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let k = unique_key("alice");
    let short = Duration::from_millis(100);
    let lease = inserted(
        store
            .insert_or_get(&request(&k, fp(1), short, DAY))
            .await
            .unwrap(),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..2 {
        let (rec, now) = existing(
            store
                .insert_or_get(&request(&k, fp(1), LONG, DAY))
                .await
                .unwrap(),
        );
        assert!(
            now >= rec.lease_expires_at.unwrap(),
            "lapsed by the server clock"
        );
        assert_eq!(
            (rec.state, rec.fence, rec.lease_token),
            (RecordState::InProgress, lease.fence, Some(lease.token)),
            "the record is untouched"
        );
    }
}

/// A take-over of a failed or completed record clears the old outcome (completion time,
/// response fields, checksum) and keeps `created_at`, the fingerprint and the expiry.
#[tokio::test]
async fn a_take_over_clears_the_old_outcome() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let mut raw = common::raw(&common::url().unwrap()).await;
    for complete in [false, true] {
        let k = unique_key("alice");
        let first = inserted(
            store
                .insert_or_get(&request(&k, fp(1), LONG, DAY))
                .await
                .unwrap(),
        );
        if complete {
            store.complete(&first, &response(8)).await.unwrap();
        } else {
            store.fail(&first).await.unwrap();
        }
        let done = store.get(&k).await.unwrap().unwrap();
        assert!(done.completed_at.is_some());
        let second = store
            .take_over(&done, LeaseToken::random(), LONG)
            .await
            .unwrap()
            .expect("taken over");
        let rec = store.get(&k).await.unwrap().unwrap();
        assert_eq!(
            (rec.state, rec.completed_at),
            (RecordState::InProgress, None)
        );
        assert_eq!(rec.response, None);
        assert_eq!(
            (rec.created_at, rec.expires_at, rec.fingerprint),
            (done.created_at, done.expires_at, done.fingerprint)
        );
        assert_eq!(rec.lease_token, Some(second.token));
        let names = field_names(&mut raw, &store.record_key(&k)).await;
        for gone in ["co", "rs", "rh", "rb", "rr", "cs"] {
            assert!(!names.iter().any(|n| n == gone), "{gone} in {names:?}");
        }
    }
}

#[tokio::test]
async fn unreadable_records_are_corrupt_and_left_alone() {
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
    store.complete(&lease, &response(8)).await.unwrap();
    let key = store.record_key(&k);
    let _: i64 = raw.hset(&key, "st", "done").await.unwrap();
    for outcome in [
        store
            .insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .map(drop),
        store.get(&k).await.map(drop),
    ] {
        assert!(
            matches!(&outcome, Err(StoreError::Corrupt { detail }) if detail.contains("state")),
            "{outcome:?}"
        );
    }
    let state: String = raw.hget(&key, "st").await.unwrap();
    assert_eq!(state, "done", "insert_or_get did not overwrite it");

    // a key of another type
    let _: () = raw.del(&key).await.unwrap();
    let _: () = raw.set(&key, "not a hash").await.unwrap();
    let outcome = store.insert_or_get(&request(&k, fp(1), LONG, DAY)).await;
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
    let lease = inserted(
        store
            .insert_or_get(&request(&alice, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    store.complete(&lease, &response(8)).await.unwrap();
    let bob = idemgate_core::ScopedKey {
        principal: "bob".into(),
        ..alice.clone()
    };
    store.track(&bob);
    let _: () = raw
        .rename(store.record_key(&alice), store.record_key(&bob))
        .await
        .unwrap();
    assert!(matches!(
        store.get(&bob).await,
        Err(StoreError::Corrupt { .. })
    ));
    assert!(matches!(
        store.insert_or_get(&request(&bob, fp(1), LONG, DAY)).await,
        Err(StoreError::Corrupt { .. })
    ));
}

#[tokio::test]
async fn prefixes_separate_stores() {
    let (Some(a), Some(b)) = (common::fresh_store().await, common::fresh_store().await) else {
        return;
    };
    let k = unique_key("alice");
    inserted(
        a.insert_or_get(&request(&k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    inserted(
        b.insert_or_get(&request(&k, fp(2), LONG, DAY))
            .await
            .unwrap(),
    );
    assert_ne!(a.record_key(&k), b.record_key(&k));
}
