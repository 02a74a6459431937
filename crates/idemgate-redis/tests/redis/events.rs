//! Key events: an outcome written with its event (`write_announced`) publishes it from the
//! outcome script itself, only when the write lands.

use futures_util::StreamExt;
use idemgate_core::events::{EventKind, KeyEvent, KeyId, Released};
use idemgate_core::store::OutcomeWrite;
use idemgate_core::testing::{fp, inserted, request, response, unique_key};
use idemgate_core::{IdempotencyStore, Lease, LeaseToken, StoreError};

use crate::{common, DAY, LONG};

fn event(lease: &Lease, kind: EventKind) -> KeyEvent {
    KeyEvent {
        key: KeyId::of(&lease.key),
        kind,
    }
}

#[tokio::test]
async fn each_outcome_write_publishes_its_event_when_it_lands_and_a_stale_one_does_not() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let client = redis::Client::open(common::url().unwrap()).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub
        .subscribe(format!("{}events", store.key_prefix()))
        .await
        .unwrap();
    let mut messages = pubsub.on_message();
    let body = response(64);
    let released = EventKind::Released(Released {
        lease: 7,
        status: 503,
        retry_after_ms: Some(1500),
    });
    for (write, kind) in [
        (OutcomeWrite::Complete(&body), EventKind::Written),
        (OutcomeWrite::Fail, EventKind::Written),
        (OutcomeWrite::Release, released),
    ] {
        let k = unique_key("alice");
        let lease = inserted(
            store
                .insert_or_get(&request(&k, fp(1), LONG, DAY))
                .await
                .unwrap(),
        );
        // A stale lease writes nothing, so it publishes nothing: the next message is the
        // held lease's.
        let stale = Lease {
            token: LeaseToken(lease.token.0 ^ 1),
            ..lease.clone()
        };
        let stale_event = event(&stale, EventKind::Written);
        let refused = store.write_announced(&stale, write, &stale_event).await;
        assert!(matches!(refused, Err(StoreError::LeaseLost)), "{write:?}");
        let sent = event(&lease, kind);
        store.write_announced(&lease, write, &sent).await.unwrap();
        let got = messages.next().await.unwrap();
        assert_eq!(
            got.get_payload::<String>().unwrap(),
            sent.encode(),
            "{write:?}"
        );
    }
}
