//! Records written by the previous version of this crate: the same hash layout, but no
//! response checksum (`cs`). They still validate and replay; one whose body or headers
//! field is missing is corrupt (the previous version replayed it as empty).

use bytes::Bytes;
use idemgate_core::testing::{existing, fp, inserted, request, response, unique_key};
use idemgate_core::{IdempotencyStore, RecordState, ScopedKey, StoreError, StoredResponse};
use redis::AsyncCommands;

use crate::common::{self, TestStore};
use crate::{DAY, LONG};

/// Writes a completed record of `key` the way the previous `complete.lua` left it: no `cs`.
async fn write_old_record(store: &TestStore, key: &ScopedKey, resp: &StoredResponse) -> String {
    let mut raw = common::raw(&common::url().unwrap()).await;
    let lease = inserted(
        store
            .insert_or_get(&request(key, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    let k = store.record_key(key);
    let _: () = raw.hdel(&k, &["lt", "le"]).await.unwrap();
    let fields: [(&str, Vec<u8>); 6] = [
        ("st", b"completed".to_vec()),
        ("co", lease.expires_at.to_string().into_bytes()),
        ("rs", resp.status.to_string().into_bytes()),
        ("rh", resp.encode_headers()),
        ("rb", resp.body.to_vec()),
        ("rr", if resp.replayable { b"1" } else { b"0" }.to_vec()),
    ];
    let _: () = raw.hset_multiple(&k, &fields).await.unwrap();
    k
}

#[tokio::test]
async fn a_record_written_before_checksums_replays() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let not_replayable = StoredResponse {
        body: Bytes::new(),
        replayable: false,
        ..response(0)
    };
    let empty = StoredResponse {
        headers: Vec::new(),
        ..response(0)
    };
    for resp in [response(300), empty, not_replayable] {
        let k = unique_key("alice");
        write_old_record(&store, &k, &resp).await;
        let rec = store.get(&k).await.unwrap().expect("old record kept");
        assert_eq!(rec.state, RecordState::Completed);
        assert_eq!(rec.response.as_ref(), Some(&resp));
        let (rec, _) = existing(
            store
                .insert_or_get(&request(&k, fp(1), LONG, DAY))
                .await
                .unwrap(),
        );
        assert_eq!(rec.response, Some(resp));
    }
}

/// The previous version read a missing body or headers field as empty; now such a record
/// is corrupt, checksum or not, and is left as it is.
#[tokio::test]
async fn a_missing_body_or_headers_field_is_corrupt() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let mut raw = common::raw(&common::url().unwrap()).await;
    for field in ["rb", "rh"] {
        let k = unique_key("alice");
        let key = write_old_record(&store, &k, &response(16)).await;
        let _: () = raw.hdel(&key, field).await.unwrap();
        for outcome in [
            store.get(&k).await.map(drop),
            store
                .insert_or_get(&request(&k, fp(1), LONG, DAY))
                .await
                .map(drop),
        ] {
            assert!(
                matches!(outcome, Err(StoreError::Corrupt { .. })),
                "{field}: {outcome:?}"
            );
        }
        let exists: bool = raw.hexists(&key, "st").await.unwrap();
        assert!(exists, "{field}: the record is left alone");
    }
}

/// An empty replayable body is stored as a present, empty field (so "missing" keeps
/// meaning "damaged").
#[tokio::test]
async fn an_empty_body_is_stored_as_a_present_field() {
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
    store.complete(&lease, &response(0)).await.unwrap();
    let body: Option<Vec<u8>> = raw.hget(store.record_key(&k), "rb").await.unwrap();
    assert_eq!(body, Some(Vec::new()));
    let rec = store.get(&k).await.unwrap().unwrap();
    assert_eq!(rec.response, Some(response(0)));
}
