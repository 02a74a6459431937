//! Sealed responses ([`crate::seal`]) on every store: the key id and the sealed bytes are
//! kept as written, a lifecycle with the key replays the response in clear, and one
//! without it answers `Corrupt`.

use std::sync::Arc;

use bytes::Bytes;

use crate::lifecycle::{Answer, Begin, Lifecycle, Outcome, RoutePlan};
use crate::seal::Keyring;
use crate::store::IdempotencyStore;

use super::{existing, fp, insert, request, response, unique_key, DAY, LONG};

/// Two test keyrings: one key, and that key behind a newer one.
fn rings() -> (Arc<Keyring>, Arc<Keyring>) {
    let old = Keyring::new(vec![[0x5a; 32]]).unwrap();
    let rotated = Keyring::new(vec![[0xa5; 32], [0x5a; 32]]).unwrap();
    (Arc::new(old), Arc::new(rotated))
}

/// A sealed response and its key id are stored as written, for replayable and not
/// replayable responses; the lifecycle opens them with any configured key and refuses them
/// without one.
pub async fn sealed_responses_are_kept_and_opened<S: IdempotencyStore>(s: S) {
    let s = Arc::new(s);
    let (old, rotated) = rings();
    let mut quiet = response(0);
    quiet.replayable = false;
    for clear in [response(4096), quiet] {
        let k = unique_key("alice");
        let lease = insert(&*s, &k, fp(1)).await;
        let sealed = old.seal(&k, lease.fence, &clear);
        s.complete(&lease, &sealed).await.unwrap();
        let (rec, _) = existing(
            s.insert_or_get(&request(&k, fp(1), LONG, DAY))
                .await
                .unwrap(),
        );
        assert_eq!(rec.response.as_ref(), Some(&sealed), "stored as written");
        let plan = RoutePlan::default();
        let begin = |ring: Option<Arc<Keyring>>| {
            let lifecycle = Lifecycle::new(s.clone(), Default::default()).with_keyring(ring);
            let k = k.clone();
            async move { lifecycle.begin(&k, fp(1), &plan, |_| async { None }).await }
        };
        match (begin(Some(rotated.clone())).await, clear.replayable) {
            (Begin::Answer(Answer::Replay(r)), true) => assert_eq!(r, clear),
            (Begin::Answer(Answer::NotReplayable { status, .. }), false) => {
                assert_eq!(status, clear.status)
            }
            (other, _) => panic!("rotated keyring: {other:?}"),
        }
        let newer_only = Keyring::new(vec![[0xa5; 32]]).unwrap();
        for ring in [None, Some(Arc::new(newer_only))] {
            let answer = begin(ring).await;
            assert!(
                matches!(answer, Begin::Answer(Answer::Corrupt)),
                "{answer:?}"
            );
        }
    }
}

/// A lifecycle with keys stores what it completes sealed (no byte of the body in clear)
/// and replays it; the fresh record of a later request is in clear when keys are gone.
pub async fn lifecycle_seals_what_it_stores<S: IdempotencyStore>(s: S) {
    let s = Arc::new(s);
    let (_, rotated) = rings();
    let lifecycle =
        Lifecycle::new(s.clone(), Default::default()).with_keyring(Some(rotated.clone()));
    let plan = RoutePlan::default();
    let k = unique_key("alice");
    let Begin::Run(holder) = lifecycle.begin(&k, fp(1), &plan, |_| async { None }).await else {
        panic!("first request runs")
    };
    let mut clear = response(0);
    clear.body = Bytes::from_static(b"{\"card\":\"marker-sealed-4242\"}");
    lifecycle
        .finish(&holder, Outcome::Complete(clear.clone()))
        .await;
    let rec = s.get(&k).await.unwrap().expect("record kept");
    let stored = rec.response.expect("completed");
    assert_eq!(stored.sealed_by, Some(rotated.sealing_id()));
    assert!(stored.headers.is_empty());
    assert!(!stored.body.windows(6).any(|w| w == b"marker"));
    match lifecycle.begin(&k, fp(1), &plan, |_| async { None }).await {
        Begin::Answer(Answer::Replay(r)) => assert_eq!(r, clear),
        other => panic!("{other:?}"),
    }
    // The stored fingerprint is keyed: no plain SHA-256 of the request is stored.
    assert_eq!(rec.fingerprint, rotated.keyed_fingerprint(fp(1)));
    assert_ne!(rec.fingerprint.digest, fp(1).digest);
    assert!(lifecycle.same_fingerprint(&rec.fingerprint, fp(1)));
    assert!(!lifecycle.same_fingerprint(&rec.fingerprint, fp(2)));
    let other = lifecycle.begin(&k, fp(2), &plan, |_| async { None }).await;
    assert!(
        matches!(other, Begin::Answer(Answer::Mismatch)),
        "{other:?}"
    );
    // After a rotation the old key still matches its records' fingerprints.
    let next = Keyring::new(vec![[0x77; 32], [0xa5; 32], [0x5a; 32]]).unwrap();
    let after = Lifecycle::new(s.clone(), Default::default()).with_keyring(Some(Arc::new(next)));
    match after.begin(&k, fp(1), &plan, |_| async { None }).await {
        Begin::Answer(Answer::Replay(r)) => assert_eq!(r, clear),
        other => panic!("after a rotation: {other:?}"),
    }
    // Without its keys a sealed record answers `Corrupt`, whatever the request: never a
    // replay, never a run.
    let keyless = Lifecycle::new(s.clone(), Default::default());
    let other_keys = Lifecycle::new(s.clone(), Default::default())
        .with_keyring(Some(Arc::new(Keyring::new(vec![[0x33; 32]]).unwrap())));
    for lifecycle in [keyless, other_keys] {
        for request in [fp(1), fp(2)] {
            let answer = lifecycle
                .begin(&k, request, &plan, |_| async { None })
                .await;
            assert!(
                matches!(answer, Begin::Answer(Answer::Corrupt)),
                "{answer:?}"
            );
        }
    }
}
