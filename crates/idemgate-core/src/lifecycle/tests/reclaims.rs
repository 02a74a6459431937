//! Follow-ups of inserts whose answer was lost: they go on until the record's TTL, and past
//! the running bound they are queued, never dropped.

use super::*;
use crate::lifecycle::reclaim::{next_look, queue, Reclaims};

/// Answers `503` to a request whose insert lands in the store but whose answer is lost.
async fn lose_one(e: &Lifecycle<Faulty>, s: &Faulty, k: &ScopedKey, p: &RoutePlan) {
    s.lose_insert_reply.store(true, Ordering::SeqCst);
    assert!(matches!(answer(e, k, p).await, Answer::Unavailable(_)));
    s.lose_insert_reply.store(false, Ordering::SeqCst);
}

#[test]
fn lookups_back_off_to_5s_then_every_30s_with_no_end_of_their_own() {
    let mut delay = Duration::from_millis(200);
    let mut waits = Vec::new();
    for _ in 0..6 {
        delay = next_look(delay, Duration::from_secs(1));
        waits.push(delay.as_millis());
    }
    assert_eq!(waits, [400, 800, 1600, 3200, 5000, 5000]);
    let old = Duration::from_secs(600);
    assert_eq!(next_look(delay, old), Duration::from_secs(30));
    let day = Duration::from_secs(24 * 3600);
    assert_eq!(
        next_look(Duration::from_secs(30), day),
        Duration::from_secs(30)
    );
}

/// The old follow-up gave up after 600 s, leaving the orphan to read `outcome-unknown`.
#[tokio::test(start_paused = true)]
async fn a_follow_up_keeps_looking_past_ten_minutes_until_the_store_answers() {
    let (e, s) = engine();
    let (k, p) = (unique_key("alice"), RoutePlan::default());
    s.down_after_insert.store(true, Ordering::SeqCst);
    lose_one(&e, &s, &k, &p).await;
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(s.inner.get(&k).await.unwrap().is_some(), "kept while down");
    assert_eq!(
        e.reclaims_load(),
        (1, 0),
        "still following up after an hour"
    );
    s.down.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(31)).await;
    assert!(
        s.inner.get(&k).await.unwrap().is_none(),
        "released when back"
    );
    assert_eq!(e.reclaims_load(), (0, 0));
    assert!(
        matches!(begin(&e, &k, &p).await, Begin::Run(_)),
        "runs once"
    );
}

/// A statement the database finishes after the connection that sent it broke: the first
/// lookups find nothing, the record lands seconds later and is still released.
#[tokio::test(start_paused = true)]
async fn an_insert_that_lands_after_its_error_is_still_released() {
    let (e, s) = engine();
    let (k, p) = (unique_key("alice"), RoutePlan::default());
    s.defer_insert.store(true, Ordering::SeqCst);
    assert!(matches!(answer(&e, &k, &p).await, Answer::Unavailable(_)));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(s.inner.get(&k).await.unwrap().is_none(), "not landed yet");
    let late = s
        .deferred
        .lock()
        .unwrap()
        .take()
        .expect("the insert was sent");
    assert!(matches!(
        s.inner.insert_or_get(&late).await.unwrap(),
        InsertOutcome::Inserted(_)
    ));
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        s.inner.get(&k).await.unwrap().is_none(),
        "the late record released"
    );
    assert_eq!(e.reclaims_load(), (0, 0));
    assert!(
        matches!(begin(&e, &k, &p).await, Begin::Run(_)),
        "runs once"
    );
}

#[tokio::test(start_paused = true)]
async fn a_follow_up_ends_when_the_records_ttl_has_passed() {
    let (e, s) = engine();
    let p = RoutePlan {
        record_ttl: Duration::from_secs(3600),
        ..RoutePlan::default()
    };
    let k = unique_key("alice");
    s.down_after_insert.store(true, Ordering::SeqCst);
    lose_one(&e, &s, &k, &p).await;
    tokio::time::sleep(Duration::from_secs(3500)).await;
    assert_eq!(e.reclaims_load(), (1, 0), "following up within the TTL");
    tokio::time::sleep(Duration::from_secs(200)).await;
    assert_eq!(e.reclaims_load(), (0, 0), "nothing left to release past it");
}

/// The old bound dropped the 1,025th follow-up: its orphan read `outcome-unknown`.
#[tokio::test(start_paused = true)]
async fn past_1024_follow_ups_the_rest_are_queued_and_run() {
    let (e, s) = engine();
    let p = RoutePlan::default();
    let keys: Vec<ScopedKey> = (0..=queue::MAX_RUNNING)
        .map(|_| unique_key("alice"))
        .collect();
    for k in &keys {
        lose_one(&e, &s, k, &p).await;
    }
    assert_eq!(
        e.reclaims_load(),
        (queue::MAX_RUNNING, 1),
        "the last is queued"
    );
    // Down: every running follow-up keeps its slot, and the queued one waits.
    s.down.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(s.inner.len(), keys.len(), "every orphan kept while down");
    assert_eq!(e.reclaims_load(), (queue::MAX_RUNNING, 1));
    s.down.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        s.inner.len(),
        0,
        "every orphan released, the queued one too"
    );
    assert_eq!(e.reclaims_load(), (0, 0));
    let last = keys.last().unwrap();
    assert!(matches!(begin(&e, last, &p).await, Begin::Run(_)));
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_refuses_new_requests_before_their_insert_until_it_drains() {
    let (mut e, s) = engine();
    // One follow-up runs at once; one queued fills the queue.
    e.reclaims = Arc::new(Reclaims::new(1, 1));
    let p = RoutePlan::default();
    let (first, second, third) = (unique_key("a"), unique_key("b"), unique_key("c"));
    s.down_after_insert.store(true, Ordering::SeqCst);
    lose_one(&e, &s, &first, &p).await;
    s.down.store(false, Ordering::SeqCst);
    lose_one(&e, &s, &second, &p).await;
    s.down.store(true, Ordering::SeqCst);
    assert_eq!(e.reclaims_load(), (1, 1));
    let calls = s.calls.load(Ordering::SeqCst);
    assert!(matches!(answer(&e, &third, &p).await, Answer::Overloaded));
    assert_eq!(
        s.calls.load(Ordering::SeqCst),
        calls,
        "refused before the store"
    );
    s.down.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(s.inner.len(), 0, "both orphans released, in turn");
    assert_eq!(e.reclaims_load(), (0, 0));
    assert!(matches!(begin(&e, &third, &p).await, Begin::Run(_)));
}

/// A definite refusal (the store answered: nothing was inserted) used to start a follow-up
/// polling for 24 h; 1,250 of them filled the queue and every keyed request got `503`.
#[tokio::test(start_paused = true)]
async fn a_definite_refusal_of_the_insert_starts_no_follow_up() {
    let (e, s) = engine();
    let p = RoutePlan::default();
    s.refuse.store(true, Ordering::SeqCst);
    for _ in 0..3 {
        let k = unique_key("alice");
        assert!(matches!(answer(&e, &k, &p).await, Answer::Unavailable(_)));
    }
    assert_eq!(e.reclaims_load(), (0, 0), "nothing was inserted");
    let calls = s.calls.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(s.calls.load(Ordering::SeqCst), calls, "no lookups");
}

/// An insert whose answer was lost, then lookups the store refuses with a definite answer
/// for the key: the follow-up ends after the settle instead of polling until the TTL.
#[tokio::test(start_paused = true)]
async fn a_follow_up_ends_when_the_store_refuses_the_lookup() {
    let (e, s) = engine();
    let (k, p) = (unique_key("alice"), RoutePlan::default());
    s.defer_insert.store(true, Ordering::SeqCst);
    assert!(matches!(answer(&e, &k, &p).await, Answer::Unavailable(_)));
    assert_eq!(
        e.reclaims_load(),
        (1, 0),
        "the answer was lost: followed up"
    );
    s.refuse.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(e.reclaims_load(), (0, 0), "ended, not polling for 24 h");
}
