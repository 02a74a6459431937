//! Lifecycle tests on the memory store under a paused tokio clock: no real sleeps.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::*;

mod faulty;
mod reclaims;
mod sizes;
mod versions;
mod waits;
use crate::engine::LeaseExpiredPolicy;
use crate::record::RecordState;
use crate::testing::{damage_memory, fp, response, unique_key, Damage};
use faulty::Faulty;

fn engine() -> (Lifecycle<Faulty>, Arc<Faulty>) {
    let store = Arc::new(Faulty::default());
    (
        Lifecycle::new(store.clone(), LifecycleConfig::default()),
        store,
    )
}

fn plan(lease_expired: LeaseExpiredPolicy) -> RoutePlan {
    RoutePlan {
        lease_expired,
        ..RoutePlan::default()
    }
}

async fn begin(e: &Lifecycle<Faulty>, key: &ScopedKey, p: &RoutePlan) -> Begin {
    e.begin(key, fp(1), p, |_| async { None }).await
}

async fn run(e: &Lifecycle<Faulty>, key: &ScopedKey, p: &RoutePlan) -> Holder {
    match begin(e, key, p).await {
        Begin::Run(h) => h,
        Begin::Answer(a) => panic!("expected Run, got {a:?}"),
    }
}

async fn answer(e: &Lifecycle<Faulty>, key: &ScopedKey, p: &RoutePlan) -> Answer {
    match begin(e, key, p).await {
        Begin::Answer(a) => a,
        Begin::Run(h) => panic!("expected an answer, got Run({h:?})"),
    }
}

const LEASE: Duration = Duration::from_secs(10);
/// How long a hung store call takes to answer after all.
pub(super) const HANG: Duration = Duration::from_secs(200);

#[tokio::test(start_paused = true)]
async fn a_second_request_while_the_first_runs_gets_409_then_the_replay() {
    let (e, _) = engine();
    let (k, p) = (unique_key("alice"), RoutePlan::default());
    let h = run(&e, &k, &p).await;
    assert!(!h.takeover);
    assert!(matches!(
        answer(&e, &k, &p).await,
        Answer::InFlight {
            retry_after_ms: 1000
        }
    ));
    assert!(matches!(
        e.begin(&k, fp(2), &p, |_| async { None }).await,
        Begin::Answer(Answer::Mismatch)
    ));
    assert_eq!(
        e.finish(&h, Outcome::Complete(response(3))).await,
        Finished::Landed
    );
    assert!(matches!(answer(&e, &k, &p).await, Answer::Replay(r) if r == response(3)));
}

#[tokio::test(start_paused = true)]
async fn a_slow_operation_keeps_its_lease_by_renewing() {
    let (e, _) = engine();
    let (k, p) = (unique_key("alice"), plan(LeaseExpiredPolicy::Takeover));
    let h = run(&e, &k, &p).await;
    let probe = async {
        for _ in 0..10 {
            tokio::time::sleep(LEASE).await; // 100 s in all: ten leases
            assert!(
                matches!(answer(&e, &k, &p).await, Answer::InFlight { .. }),
                "no takeover of a live holder"
            );
        }
        7
    };
    assert_eq!(e.hold(&h, probe).await, 7);
    assert_eq!(e.finish(&h, Outcome::Fail).await, Finished::Landed);
    assert!(matches!(answer(&e, &k, &p).await, Answer::PreviousFailed));
}

#[tokio::test(start_paused = true)]
async fn a_lapsed_lease_means_outcome_unknown_and_a_late_outcome_is_replayed() {
    let (e, _) = engine();
    let (k, p) = (unique_key("alice"), RoutePlan::default());
    let h = run(&e, &k, &p).await; // the holder stops renewing: it crashed, or lost the store
    tokio::time::sleep(LEASE + Duration::from_millis(1)).await;
    assert!(matches!(answer(&e, &k, &p).await, Answer::OutcomeUnknown));
    assert!(
        matches!(answer(&e, &k, &p).await, Answer::OutcomeUnknown),
        "the record is kept"
    );
    assert_eq!(
        e.finish(&h, Outcome::Complete(response(1))).await,
        Finished::Landed
    );
    assert!(matches!(answer(&e, &k, &p).await, Answer::Replay(_)));
}

#[tokio::test(start_paused = true)]
async fn takeover_policy_runs_again_marked_and_fences_out_the_old_holder() {
    let (e, _) = engine();
    let (k, p) = (unique_key("alice"), plan(LeaseExpiredPolicy::Takeover));
    let old = run(&e, &k, &p).await;
    tokio::time::sleep(LEASE + Duration::from_millis(1)).await;
    let new = run(&e, &k, &p).await;
    assert!(new.takeover);
    assert_eq!(new.lease.fence, old.lease.fence + 1);
    assert_eq!(
        e.finish(&old, Outcome::Complete(response(1))).await,
        Finished::LeaseLost
    );
    assert_eq!(
        e.finish(&new, Outcome::Complete(response(2))).await,
        Finished::Landed
    );
    assert!(matches!(answer(&e, &k, &p).await, Answer::Replay(r) if r == response(2)));
    let fail = plan(LeaseExpiredPolicy::Fail);
    let k2 = unique_key("alice");
    let _h = run(&e, &k2, &fail).await;
    tokio::time::sleep(LEASE + Duration::from_millis(1)).await;
    assert!(matches!(
        answer(&e, &k2, &fail).await,
        Answer::PreviousFailed
    ));
}

#[tokio::test(start_paused = true)]
async fn a_take_over_that_did_nothing_leaves_the_record_to_lapse_and_be_taken_over_again() {
    let (e, _) = engine();
    let (k, p) = (unique_key("alice"), plan(LeaseExpiredPolicy::Takeover));
    let _first = run(&e, &k, &p).await; // it may have run before it stopped renewing
    tokio::time::sleep(LEASE + Duration::from_millis(1)).await;
    let second = run(&e, &k, &p).await;
    assert!(second.takeover);
    let nothing = Outcome::Release {
        status: 503,
        retry_after_ms: None,
    };
    assert_eq!(e.finish(&second, nothing).await, Finished::LeftToLapse);
    // Never a fresh, unmarked run: in flight under the take-over's lease, then taken over
    // again, marked.
    assert!(matches!(answer(&e, &k, &p).await, Answer::InFlight { .. }));
    tokio::time::sleep(LEASE + Duration::from_millis(1)).await;
    let third = run(&e, &k, &p).await;
    assert!(third.takeover);
    assert_eq!(third.lease.fence, second.lease.fence + 1);
}

#[tokio::test(start_paused = true)]
async fn a_record_that_changes_under_the_decision_is_reconciled_without_a_false_503() {
    let (e, s) = engine();
    let (k, p) = (unique_key("alice"), plan(LeaseExpiredPolicy::Takeover));
    let _h = run(&e, &k, &p).await;
    tokio::time::sleep(LEASE + Duration::from_millis(1)).await;
    // two lost races, then the takeover goes through
    s.refuse_take_overs.store(2, Ordering::SeqCst);
    assert!(run(&e, &k, &p).await.takeover);
    // a record that keeps changing: 409, never 503
    let k2 = unique_key("alice");
    let _h2 = run(&e, &k2, &p).await;
    tokio::time::sleep(LEASE + Duration::from_millis(1)).await;
    s.refuse_take_overs.store(usize::MAX, Ordering::SeqCst);
    assert!(matches!(answer(&e, &k2, &p).await, Answer::InFlight { .. }));
}

#[tokio::test(start_paused = true)]
async fn outcome_writes_outlast_a_store_outage_and_keep_renewing() {
    let (e, s) = engine();
    let (k, p) = (unique_key("alice"), plan(LeaseExpiredPolicy::Takeover));
    let h = run(&e, &k, &p).await;
    s.down.store(true, Ordering::SeqCst);
    let e2 = e.clone();
    let h2 = Holder {
        lease: h.lease.clone(),
        takeover: false,
        announce: false,
        lease_ttl: h.lease_ttl,
        record_deadline: h.record_deadline,
    };
    let writer = tokio::spawn(async move { e2.finish(&h2, Outcome::Complete(response(9))).await });
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(e.pending_outcomes().0, 1);
    s.down.store(false, Ordering::SeqCst);
    // up again within the lease: the holder still holds, a retry waits
    assert!(matches!(answer(&e, &k, &p).await, Answer::InFlight { .. }));
    assert_eq!(writer.await.unwrap(), Finished::Landed);
    assert_eq!(e.pending_outcomes(), (0, 0));
    assert!(matches!(answer(&e, &k, &p).await, Answer::Replay(r) if r == response(9)));
}

#[tokio::test(start_paused = true)]
async fn outcome_writes_give_up_only_when_the_record_expired() {
    let (e, s) = engine();
    let k = unique_key("alice");
    let p = RoutePlan {
        record_ttl: Duration::from_secs(60),
        ..RoutePlan::default()
    };
    let h = run(&e, &k, &p).await;
    s.down.store(true, Ordering::SeqCst);
    let started = Instant::now();
    assert_eq!(e.finish(&h, Outcome::Fail).await, Finished::Expired);
    assert!(
        started.elapsed() >= Duration::from_secs(59),
        "kept trying for the record's TTL"
    );
}

#[tokio::test(start_paused = true)]
async fn pending_outcomes_are_bounded() {
    let store = Arc::new(Faulty::default());
    let config = LifecycleConfig {
        max_pending_outcomes: 2,
        ..LifecycleConfig::default()
    };
    let e = Lifecycle::new(store.clone(), config);
    let p = RoutePlan::default();
    let holders = [run_on(&e, &p).await, run_on(&e, &p).await];
    store.down.store(true, Ordering::SeqCst);
    for h in holders {
        let e = e.clone();
        tokio::spawn(async move { e.finish(&h, Outcome::UNSENT).await });
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    store.down.store(false, Ordering::SeqCst);
    let calls = store.calls.load(Ordering::SeqCst);
    let over = e
        .begin(&unique_key("bob"), fp(1), &p, |_| async { None })
        .await;
    assert!(matches!(over, Begin::Answer(Answer::Overloaded)));
    assert!(
        store.calls.load(Ordering::SeqCst) <= calls + 2,
        "refused before the store"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(e.pending_outcomes(), (0, 0));
    assert!(matches!(
        e.begin(&unique_key("bob"), fp(1), &p, |_| async { None })
            .await,
        Begin::Run(_)
    ));
}

async fn run_on(e: &Lifecycle<Faulty>, p: &RoutePlan) -> Holder {
    run(e, &unique_key("carol"), p).await
}

#[tokio::test(start_paused = true)]
async fn a_store_that_hangs_answers_unavailable_within_the_deadline_and_the_insert_is_reclaimed() {
    let (e, s) = engine();
    let (k, p) = (unique_key("alice"), RoutePlan::default());
    s.hang.store(true, Ordering::SeqCst);
    let started = Instant::now();
    assert!(matches!(
        answer(&e, &k, &p).await,
        Answer::Unavailable(StoreError::Timeout)
    ));
    assert_eq!(started.elapsed(), e.config().store_timeout);
    s.hang.store(false, Ordering::SeqCst);
    // the hung insert lands minutes later; its record is released, not left to lapse
    tokio::time::sleep(HANG + Duration::from_secs(1)).await;
    assert!(
        s.inner.get(&k).await.unwrap().is_none(),
        "orphaned insert released"
    );
    assert!(matches!(begin(&e, &k, &p).await, Begin::Run(_)));
}

#[tokio::test(start_paused = true)]
async fn a_named_attempt_whose_insert_reply_was_lost_keeps_its_lease_for_its_retry() {
    let (e, s) = engine();
    let (k, p) = (unique_key("alice"), RoutePlan::default());
    let token = crate::record::LeaseToken(42);
    let fp1 = crate::testing::fp(1);
    s.lose_insert_reply.store(true, Ordering::SeqCst);
    let first = e
        .begin_with_token(&k, fp1, &p, token, |_| async { None })
        .await;
    assert!(matches!(first, Begin::Answer(Answer::Unavailable(_))));
    s.lose_insert_reply.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(5)).await;
    // Not released: the retry of this attempt finds its own lease still there.
    let r = s.inner.get(&k).await.unwrap().expect("kept for the retry");
    assert_eq!(r.lease_token, Some(token));
    // Another attempt is refused while it holds.
    assert!(matches!(
        e.begin_with_token(&k, fp1, &p, crate::record::LeaseToken(7), |_| async {
            None
        })
        .await,
        Begin::Answer(Answer::InFlight { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn an_insert_whose_reply_was_lost_is_released_by_its_token() {
    let (e, s) = engine();
    let (k, p) = (unique_key("alice"), RoutePlan::default());
    s.lose_insert_reply.store(true, Ordering::SeqCst);
    assert!(matches!(answer(&e, &k, &p).await, Answer::Unavailable(_)));
    s.lose_insert_reply.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        s.inner.get(&k).await.unwrap().is_none(),
        "the orphan is released"
    );
    assert!(
        matches!(begin(&e, &k, &p).await, Begin::Run(_)),
        "the retry runs, once"
    );

    // the store goes down right after losing the reply: released once it answers again
    let k2 = unique_key("alice");
    s.lose_insert_reply.store(true, Ordering::SeqCst);
    s.down_after_insert.store(true, Ordering::SeqCst);
    assert!(matches!(answer(&e, &k2, &p).await, Answer::Unavailable(_)));
    s.lose_insert_reply.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        s.inner.get(&k2).await.unwrap().is_some(),
        "kept while the store is down"
    );
    s.down.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        s.inner.get(&k2).await.unwrap().is_none(),
        "released when it is back"
    );
}

#[tokio::test(start_paused = true)]
async fn an_insert_whose_reply_never_comes_is_released_before_its_lease_lapses() {
    let (e, s) = engine();
    let (k, p) = (unique_key("alice"), RoutePlan::default());
    s.lose_insert_reply.store(true, Ordering::SeqCst);
    s.swallow_insert_reply.store(true, Ordering::SeqCst);
    assert!(matches!(
        answer(&e, &k, &p).await,
        Answer::Unavailable(StoreError::Timeout)
    ));
    s.lose_insert_reply.store(false, Ordering::SeqCst);
    // the hung call never ends; the lookup finds the orphan and releases it
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        s.inner.get(&k).await.unwrap().is_none(),
        "released within seconds"
    );
    assert!(
        matches!(begin(&e, &k, &p).await, Begin::Run(_)),
        "the retry runs, once"
    );
}

#[tokio::test(start_paused = true)]
async fn corrupt_records_are_answered_never_replayed() {
    let (e, s) = engine();
    let (k, p) = (unique_key("alice"), RoutePlan::default());
    let h = run(&e, &k, &p).await;
    e.finish(&h, Outcome::Complete(response(32))).await;
    damage_memory(&s.inner, &k, Damage::TruncateBody).await;
    assert!(matches!(answer(&e, &k, &p).await, Answer::Corrupt));
    assert_eq!(s.inner.len(), 1, "the record is kept for the operator");
}

#[tokio::test(start_paused = true)]
async fn a_record_of_another_fingerprint_version_is_compared_in_that_version() {
    let (e, _) = engine();
    let (k, p) = (unique_key("alice"), RoutePlan::default());
    let old = crate::fingerprint::Fingerprint {
        version: 0,
        digest: [5; 32],
    };
    let Begin::Run(h) = e.begin(&k, old, &p, |_| async { None }).await else {
        panic!()
    };
    e.finish(&h, Outcome::Complete(response(1))).await;
    let same = e
        .begin(&k, fp(1), &p, |v| async move { (v == 0).then_some(old) })
        .await;
    assert!(matches!(same, Begin::Answer(Answer::Replay(_))));
    let unknown = e.begin(&k, fp(1), &p, |_| async { None }).await;
    assert!(matches!(unknown, Begin::Answer(Answer::Mismatch)));
}

#[tokio::test(start_paused = true)]
async fn a_failed_record_runs_again_only_when_the_route_allows_it() {
    let (e, s) = engine();
    let k = unique_key("alice");
    let p = RoutePlan::default();
    let h = run(&e, &k, &p).await;
    e.finish(&h, Outcome::Fail).await;
    assert!(matches!(answer(&e, &k, &p).await, Answer::PreviousFailed));
    let retry = RoutePlan {
        retry_failed: true,
        ..p
    };
    let again = run(&e, &k, &retry).await;
    assert!(again.takeover);
    assert_eq!(
        s.inner.get(&k).await.unwrap().unwrap().state,
        RecordState::InProgress
    );
}

#[test]
fn plans_and_engine_settings_read_from_their_configuration_spelling() {
    let plan: RoutePlan =
        serde_json::from_str(r#"{"lease_ttl": "2s", "lease_expired": "takeover"}"#).unwrap();
    assert_eq!(
        plan,
        RoutePlan {
            lease_ttl: Duration::from_secs(2),
            lease_expired: LeaseExpiredPolicy::Takeover,
            ..RoutePlan::default()
        }
    );
    let err = serde_json::from_str::<RoutePlan>(r#"{"lease_expired": "retry"}"#).unwrap_err();
    assert!(err.to_string().contains("`retry`"), "{err}");
    let engine: LifecycleConfig = serde_json::from_str(r#"{"store_timeout": "500ms"}"#).unwrap();
    assert_eq!(engine.store_timeout, Duration::from_millis(500));
    assert!(serde_json::from_str::<LifecycleConfig>(r#"{"store_timout": "1s"}"#).is_err());
}
