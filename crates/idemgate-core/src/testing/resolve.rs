//! The conformance cases of an operator's resolution ([`crate::admin::resolve`]): the store
//! primitives it is made of (take over the record as shown, complete under the new lease)
//! fence the original holder out, refuse a record that changed, and keep what the operator
//! recorded, on every store.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::admin::{
    resolution_of, resolve, resolved_detail, AdminStore, KeyFilter, NotResolvable, Operator,
    OperatorOutcome, ResolveError,
};
use crate::lifecycle::{Answer, Begin, Lifecycle, RoutePlan};
use crate::record::{IdempotencyRecord, LeaseToken, RecordState, ScopedKey, UnixMillis};
use crate::store::{IdempotencyStore, StoreError};

use super::{fp, insert, inserted, request, response, unique_key, DAY, LONG, TINY_LEASE};

/// Past [`TINY_LEASE`], with margin for the store's clock.
const PAST_TINY_LEASE: Duration = Duration::from_millis(300);

fn operator() -> Operator {
    Operator {
        name: "ops-alice".into(),
        uid: Some(1000),
        host: Some("bastion".into()),
    }
}

fn known_outcome() -> OperatorOutcome {
    OperatorOutcome::Replayable {
        status: 201,
        headers: vec![(
            "content-type".into(),
            Bytes::from_static(b"application/json"),
        )],
        body: Bytes::from_static(b"{\"id\":\"pay_1\",\"status\":\"succeeded\"}"),
    }
}

/// The record of `k` as an operator is shown it (listed raw, then validated), with the
/// store's clock at the read.
async fn shown<S: AdminStore>(s: &S, k: &ScopedKey) -> (IdempotencyRecord, UnixMillis) {
    let filter = KeyFilter {
        key: k.key.clone(),
        route: Some(k.route.clone()),
        principal: Some(k.principal.clone()),
    };
    let mut listing = s.list_key(&filter).await.unwrap();
    assert_eq!(listing.records.len(), 1, "one record of {k:?}");
    (listing.records.remove(0).validate().unwrap(), listing.now)
}

fn lost<T: std::fmt::Debug>(what: &str, r: Result<T, StoreError>) {
    assert!(
        matches!(r, Err(StoreError::LeaseLost)),
        "{what}: expected LeaseLost, got {r:?}"
    );
}

/// With keys, the operator's answer is stored sealed and replays in clear to a lifecycle
/// with those keys.
async fn resolve_seals_with_the_keys<S: IdempotencyStore>(s: &S) {
    let ring = crate::seal::Keyring::new(vec![[0x3c; 32]]).unwrap();
    let k = unique_key("alice");
    insert_tiny(s, &k).await;
    tokio::time::sleep(PAST_TINY_LEASE).await;
    let seen = s.get(&k).await.unwrap().expect("the stuck record");
    let now = crate::record::now_millis();
    let by = (now, &known_outcome(), &operator());
    let done = crate::admin::resolve_sealed(s, &seen, by, Some(&ring))
        .await
        .unwrap();
    let stored = s
        .get(&k)
        .await
        .unwrap()
        .expect("resolved")
        .response
        .unwrap();
    assert_eq!(stored.sealed_by, Some(ring.sealing_id()));
    assert!(!stored.body.windows(5).any(|w| w == b"pay_1"));
    assert_eq!(ring.open(&k, done.fence, stored).unwrap(), done.response);
}

async fn insert_tiny<S: IdempotencyStore>(s: &S, k: &ScopedKey) {
    inserted(
        s.insert_or_get(&request(k, fp(1), TINY_LEASE, DAY))
            .await
            .unwrap(),
    );
}

/// A holder acquires and loses the store past its lease; an operator resolves the stuck
/// record (takeover, fence + 1, then completion); the holder's late outcome, renewal,
/// failure and release are all refused, and the record keeps the operator's answer,
/// checksummed, with the audit entry.
pub async fn admin_resolve_fences_out_the_holder<S: IdempotencyStore + AdminStore>(s: S) {
    resolve_seals_with_the_keys(&s).await;
    let k = unique_key("alice");
    let holder = inserted(
        s.insert_or_get(&request(&k, fp(1), TINY_LEASE, DAY))
            .await
            .unwrap(),
    );
    tokio::time::sleep(PAST_TINY_LEASE).await;
    let (seen, now) = shown(&s, &k).await;
    let done = resolve(&s, &seen, now, &known_outcome(), &operator())
        .await
        .unwrap();
    assert_eq!(done.fence, holder.fence + 1);
    lost("complete", s.complete(&holder, &response(3)).await);
    lost("renew", s.renew(&holder, LONG).await);
    lost("fail", s.fail(&holder).await);
    lost("release", s.release(&holder).await);
    let rec = s.get(&k).await.unwrap().expect("the resolved record");
    assert_eq!(
        (rec.state, rec.fence, rec.fingerprint),
        (RecordState::Completed, holder.fence + 1, fp(1))
    );
    assert_eq!(rec.created_at, seen.created_at);
    let stored = rec.response.expect("a response");
    assert_eq!(stored, done.response, "the operator's answer, as written");
    assert_eq!(
        stored.body.as_ref(),
        b"{\"id\":\"pay_1\",\"status\":\"succeeded\"}"
    );
    let audit = resolution_of(&stored.headers).expect("the audit entry");
    assert_eq!(audit, done.resolution);
    assert_eq!(audit.by, operator());
    assert_eq!(
        (audit.from_state.as_str(), audit.from_fence, audit.status),
        ("in_progress", holder.fence, 201)
    );
    assert!(audit.at >= now, "the store clock at the takeover");
    shown(&s, &k).await; // still listed, and it validates (checksum included)
}

/// A record with a live lease is refused; one taken over between show and write is kept as
/// its new holder wrote it; a completed one is refused; an outcome with a reserved header
/// writes nothing.
pub async fn admin_resolve_refuses_a_changed_record<S: IdempotencyStore + AdminStore>(s: S) {
    let live = unique_key("alice");
    insert(&s, &live, fp(1)).await;
    let (seen, now) = shown(&s, &live).await;
    let refused = resolve(&s, &seen, now, &known_outcome(), &operator()).await;
    assert!(
        matches!(
            refused,
            Err(ResolveError::Refused(NotResolvable::LeaseLive { .. }))
        ),
        "{refused:?}"
    );

    let k = unique_key("alice");
    inserted(
        s.insert_or_get(&request(&k, fp(1), TINY_LEASE, DAY))
            .await
            .unwrap(),
    );
    tokio::time::sleep(PAST_TINY_LEASE).await;
    let (seen, now) = shown(&s, &k).await;
    let reserved = OperatorOutcome::Replayable {
        status: 201,
        headers: vec![("Idempotent-Resolved".into(), Bytes::from_static(b"{}"))],
        body: Bytes::new(),
    };
    let refused = resolve(&s, &seen, now, &reserved, &operator()).await;
    assert!(
        matches!(refused, Err(ResolveError::Unstorable(_))),
        "{refused:?}"
    );
    assert_eq!(shown(&s, &k).await.0, seen, "nothing written");
    // a gateway takes the record over between show and confirm
    let other = s
        .take_over(&seen, LeaseToken::random(), LONG)
        .await
        .unwrap()
        .expect("taken over");
    let changed = resolve(&s, &seen, now, &known_outcome(), &operator()).await;
    assert!(matches!(changed, Err(ResolveError::Changed)), "{changed:?}");
    let rec = s.get(&k).await.unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.fence, rec.lease_token),
        (RecordState::InProgress, other.fence, Some(other.token)),
        "kept as its new holder has it"
    );
    s.complete(&other, &response(4)).await.unwrap();
    let (done, now) = shown(&s, &k).await;
    let refused = resolve(&s, &done, now, &known_outcome(), &operator()).await;
    assert!(
        matches!(
            refused,
            Err(ResolveError::Refused(NotResolvable::Completed))
        ),
        "{refused:?}"
    );
    assert_eq!(
        s.get(&k).await.unwrap().unwrap().response,
        Some(response(4))
    );
}

/// A failed record resolved as not replayable: completed with no body, the operator's text
/// kept, and a retry answered `NotReplayable` with that text, without running.
pub async fn admin_resolve_not_replayable_keeps_the_detail<S: IdempotencyStore + AdminStore>(s: S) {
    let k = unique_key("alice");
    let lease = insert(&s, &k, fp(1)).await;
    s.fail(&lease).await.unwrap();
    let (seen, now) = shown(&s, &k).await;
    let text = "Refunded by hand, see ticket OPS-42.";
    let outcome = OperatorOutcome::NotReplayable {
        status: 201,
        detail: text.into(),
    };
    let done = resolve(&s, &seen, now, &outcome, &operator())
        .await
        .unwrap();
    assert_eq!(done.resolution.from_state, "failed");
    let rec = s.get(&k).await.unwrap().unwrap();
    let stored = rec.response.expect("a response");
    assert_eq!((stored.status, stored.replayable), (201, false));
    assert!(stored.body.is_empty());
    assert_eq!(resolved_detail(&stored.headers).as_deref(), Some(text));
    let engine = Lifecycle::new(Arc::new(s), Default::default());
    let plan = RoutePlan::default();
    match engine.begin(&k, fp(1), &plan, |_| async { None }).await {
        Begin::Answer(Answer::NotReplayable { status, detail }) => {
            assert_eq!((status, detail.as_deref()), (201, Some(text)));
        }
        other => panic!("expected NotReplayable, got {other:?}"),
    }
}
