//! Duplicates that wait ([`InFlightPolicy::Wait`]) on the memory store, under a paused
//! clock.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;

use super::super::*;
use crate::testing::{fp, response, unique_key};
use crate::MemoryStore;

fn waiting() -> RoutePlan {
    RoutePlan {
        lease_ttl: Duration::from_secs(2),
        on_in_flight: InFlightPolicy::Wait,
        max_wait: Duration::from_secs(10),
        ..RoutePlan::default()
    }
}

fn engine(max_waiters: usize) -> Lifecycle<MemoryStore> {
    let config = LifecycleConfig {
        max_waiters,
        ..LifecycleConfig::default()
    };
    Lifecycle::new(Arc::new(MemoryStore::new()), config)
}

/// Starts `n` duplicates of `key` that wait; each ends with its `Begin`.
fn duplicates(
    e: &Lifecycle<MemoryStore>,
    key: &ScopedKey,
    plan: RoutePlan,
    n: usize,
) -> JoinSet<Begin> {
    let mut set = JoinSet::new();
    for _ in 0..n {
        let (e, key) = (e.clone(), key.clone());
        set.spawn(async move {
            let acquire = match e.peek(&key, fp(1), &plan, |_| async { None }).await {
                Peek::Acquire(a) => a,
                Peek::Answer(a) => return Begin::Answer(a),
            };
            let gone = std::future::pending();
            e.begin_waiting(
                acquire,
                &key,
                fp(1),
                &plan,
                |_| async { None },
                (gone, |_| {}),
            )
            .await
        });
    }
    set
}

async fn holder(e: &Lifecycle<MemoryStore>, key: &ScopedKey, plan: &RoutePlan) -> Holder {
    match e.begin(key, fp(1), plan, |_| async { None }).await {
        Begin::Run(h) => h,
        Begin::Answer(a) => panic!("expected Run, got {a:?}"),
    }
}

/// Lets the waiters reach their wait.
async fn settle(e: &Lifecycle<MemoryStore>, n: usize) {
    for _ in 0..1000 {
        if e.waiters() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("{} waiters, not {n}", e.waiters());
}

fn released(status: u16) -> Outcome {
    Outcome::Release {
        status,
        retry_after_ms: None,
    }
}

#[tokio::test(start_paused = true)]
async fn waiters_get_the_stored_response_when_it_lands() {
    let (e, key, plan) = (engine(100), unique_key("alice"), waiting());
    let first = holder(&e, &key, &plan).await;
    let mut set = duplicates(&e, &key, plan, 50);
    settle(&e, 50).await;
    e.finish(&first, Outcome::Complete(response(3))).await;
    let mut replays = 0;
    while let Some(begun) = set.join_next().await {
        match begun.unwrap() {
            Begin::Answer(Answer::Replay(r)) => {
                assert_eq!(r, response(3));
                replays += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(replays, 50);
    assert_eq!(e.waiters(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_released_key_is_run_by_one_waiter_and_a_second_release_by_none() {
    let (e, key, plan) = (engine(100), unique_key("alice"), waiting());
    let first = holder(&e, &key, &plan).await;
    let mut set = duplicates(&e, &key, plan, 20);
    settle(&e, 20).await;
    e.finish(&first, released(503)).await;
    // Exactly one waiter runs it; the rest wait on that run.
    let second = match set.join_next().await.unwrap().unwrap() {
        Begin::Run(h) => h,
        other => panic!("{other:?}"),
    };
    settle(&e, 19).await;
    e.finish(&second, released(503)).await;
    let mut answers = 0;
    while let Some(begun) = set.join_next().await {
        match begun.unwrap() {
            Begin::Answer(Answer::Released {
                status: 503,
                retry_after_ms: None,
            }) => answers += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(answers, 19);
}

#[tokio::test(start_paused = true)]
async fn a_release_is_not_run_again_before_its_retry_after_nor_past_the_wait() {
    let (e, key, plan) = (engine(100), unique_key("alice"), waiting());
    let first = holder(&e, &key, &plan).await;
    let mut set = duplicates(&e, &key, plan, 3);
    settle(&e, 3).await;
    let started = tokio::time::Instant::now();
    let release = Outcome::Release {
        status: 503,
        retry_after_ms: Some(4000),
    };
    e.finish(&first, release).await;
    let Begin::Run(_) = set.join_next().await.unwrap().unwrap() else {
        panic!("one waiter runs it")
    };
    assert!(started.elapsed() >= Duration::from_secs(4));
    // A Retry-After beyond the wait: answered with the released status at once.
    let second = holder(&e, &unique_key("carol"), &plan).await;
    let mut set = duplicates(&e, &second.lease.key, plan, 2);
    settle(&e, 4).await;
    let release = Outcome::Release {
        status: 429,
        retry_after_ms: Some(60_000),
    };
    e.finish(&second, release).await;
    for _ in 0..2 {
        let begun = set.join_next().await.unwrap().unwrap();
        assert!(
            matches!(begun, Begin::Answer(Answer::Released { status: 429, .. })),
            "{begun:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_record_gone_without_a_release_is_never_run_by_waiters() {
    let (e, key, plan) = (engine(100), unique_key("alice"), waiting());
    let _first = holder(&e, &key, &plan).await;
    let mut set = duplicates(&e, &key, plan, 5);
    settle(&e, 5).await;
    // An operator deletes it behind the store's back (here: its TTL ends at once).
    assert!(e.store().edit_raw(&key, |r| r.expires_at = Some(0)));
    while let Some(begun) = set.join_next().await {
        let begun = begun.unwrap();
        assert!(
            matches!(begun, Begin::Answer(Answer::InFlight { .. })),
            "{begun:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_dead_holder_gives_waiters_outcome_unknown_after_its_lease() {
    let (e, key, plan) = (engine(100), unique_key("alice"), waiting());
    let first = holder(&e, &key, &plan).await;
    let started = tokio::time::Instant::now();
    let mut set = duplicates(&e, &key, plan, 3);
    drop(first); // never renewed, never finished
    while let Some(begun) = set.join_next().await {
        let begun = begun.unwrap();
        assert!(
            matches!(begun, Begin::Answer(Answer::OutcomeUnknown)),
            "{begun:?}"
        );
    }
    assert!(started.elapsed() >= plan.lease_ttl / 2);
}

#[tokio::test(start_paused = true)]
async fn waits_end_at_max_wait_and_past_max_waiters_at_once() {
    let (e, key, plan) = (engine(2), unique_key("alice"), waiting());
    let first = holder(&e, &key, &plan).await;
    let keep = tokio::spawn({
        let (e, first) = (e.clone(), first);
        async move { e.hold(&first, std::future::pending::<()>()).await }
    });
    let mut set = duplicates(&e, &key, plan, 2);
    settle(&e, 2).await;
    let started = tokio::time::Instant::now();
    let mut third = duplicates(&e, &key, plan, 1);
    let refused = third.join_next().await.unwrap().unwrap();
    assert!(matches!(refused, Begin::Answer(Answer::InFlight { .. })));
    assert_eq!(started.elapsed(), Duration::ZERO, "refused at once");
    while let Some(begun) = set.join_next().await {
        let begun = begun.unwrap();
        assert!(matches!(begun, Begin::Answer(Answer::InFlight { .. })));
    }
    assert!(started.elapsed() >= plan.max_wait - Duration::from_millis(50));
    assert!(!keep.is_finished(), "the holder still runs");
    keep.abort();
}

#[tokio::test(start_paused = true)]
async fn a_waiter_whose_client_left_stops_at_once() {
    let (e, key, plan) = (engine(100), unique_key("alice"), waiting());
    let _first = holder(&e, &key, &plan).await;
    let (left, gone) = tokio::sync::oneshot::channel::<()>();
    let waiter = tokio::spawn({
        let (e, key) = (e.clone(), key.clone());
        async move {
            let Peek::Acquire(a) = e.peek(&key, fp(1), &plan, |_| async { None }).await else {
                panic!()
            };
            let gone = async move { drop(gone.await) };
            e.begin_waiting(a, &key, fp(1), &plan, |_| async { None }, (gone, |_| {}))
                .await
        }
    });
    settle(&e, 1).await;
    drop(left);
    let begun = waiter.await.unwrap();
    assert!(matches!(begun, Begin::Answer(Answer::InFlight { .. })));
    assert_eq!(e.waiters(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_route_that_conflicts_does_not_wait() {
    let (e, key) = (engine(100), unique_key("alice"));
    let plan = RoutePlan {
        max_wait: Duration::from_secs(10),
        ..RoutePlan::default()
    };
    let _first = holder(&e, &key, &plan).await;
    let begun = duplicates(&e, &key, plan, 1)
        .join_next()
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(begun, Begin::Answer(Answer::InFlight { .. })));
    assert_eq!(e.waiters(), 0);
}

/// A release event for a lease that still holds the record (forged, or meant for another
/// lease) changes nothing: the waiters read the record after it, see the lease still
/// running, and wait on for its outcome, whatever the event's status and `Retry-After`.
#[tokio::test(start_paused = true)]
async fn a_release_event_the_record_contradicts_is_ignored() {
    let (e, key, plan) = (engine(100), unique_key("alice"), waiting());
    let first = holder(&e, &key, &plan).await;
    let mut set = duplicates(&e, &key, plan, 10);
    settle(&e, 10).await;
    let forged = crate::events::KeyEvent {
        key: crate::events::KeyId::of(&key),
        kind: crate::events::EventKind::Released(crate::events::Released {
            lease: crate::events::Released::lease_id(&first.lease),
            status: 429,
            retry_after_ms: Some(60_000),
        }),
    };
    e.waiters.deliver(forged);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(e.waiters(), 10, "nobody answered the forged release");
    e.finish(&first, Outcome::Complete(response(3))).await;
    while let Some(begun) = set.join_next().await {
        assert!(
            matches!(begun.unwrap(), Begin::Answer(Answer::Replay(_))),
            "the stored response, not the forged status"
        );
    }
}

/// A release event that comes with the completion (a forged one racing it): the read after
/// it shows the record settled, so the waiters replay it.
#[tokio::test(start_paused = true)]
async fn a_release_event_racing_the_completion_changes_no_answer() {
    let (e, key, plan) = (engine(100), unique_key("alice"), waiting());
    let first = holder(&e, &key, &plan).await;
    let mut set = duplicates(&e, &key, plan, 10);
    settle(&e, 10).await;
    let forged = |retry_after_ms| crate::events::KeyEvent {
        key: crate::events::KeyId::of(&key),
        kind: crate::events::EventKind::Released(crate::events::Released {
            lease: crate::events::Released::lease_id(&first.lease),
            status: 429,
            retry_after_ms: Some(retry_after_ms),
        }),
    };
    e.finish(&first, Outcome::Complete(response(3))).await;
    e.waiters.deliver(forged(60_000));
    e.waiters.deliver(forged(59_999));
    while let Some(begun) = set.join_next().await {
        assert!(
            matches!(begun.unwrap(), Begin::Answer(Answer::Replay(_))),
            "the stored response, not the forged status"
        );
    }
}

/// A second release of the lease already released (a forged or repeated event, with another
/// `Retry-After` so it is not dropped as heard twice) while the rerun starts: the waiters
/// wait on the rerun and replay it.
#[tokio::test(start_paused = true)]
async fn a_second_release_of_a_released_lease_changes_no_answer() {
    let (e, key, plan) = (engine(100), unique_key("alice"), waiting());
    let first = holder(&e, &key, &plan).await;
    let mut set = duplicates(&e, &key, plan, 10);
    settle(&e, 10).await;
    e.finish(&first, released(503)).await;
    let again = crate::events::KeyEvent {
        key: crate::events::KeyId::of(&key),
        kind: crate::events::EventKind::Released(crate::events::Released {
            lease: crate::events::Released::lease_id(&first.lease),
            status: 429,
            retry_after_ms: Some(60_000),
        }),
    };
    e.waiters.deliver(again);
    let rerun = match set.join_next().await.unwrap().unwrap() {
        Begin::Run(h) => h,
        other => panic!("{other:?}"),
    };
    settle(&e, 9).await;
    e.waiters.deliver(again);
    tokio::time::sleep(Duration::from_secs(1)).await;
    e.finish(&rerun, Outcome::Complete(response(3))).await;
    while let Some(begun) = set.join_next().await {
        assert!(
            matches!(begun.unwrap(), Begin::Answer(Answer::Replay(_))),
            "the rerun's response, not the repeated release's status"
        );
    }
}
