//! The bucket, in-flight accounting and the table's bound, on tokio's paused clock.

use std::num::NonZeroU32;

use idemgate_core::StoreError;
use tokio::time::advance;

use super::*;

fn rate(per_second: f64, burst: u32) -> PrincipalLimits {
    PrincipalLimits {
        max_in_flight: None,
        new_keys: Some(KeyRate::new(per_second, burst).unwrap()),
    }
}

fn in_flight(max: u32) -> PrincipalLimits {
    PrincipalLimits {
        max_in_flight: NonZeroU32::new(max),
        new_keys: None,
    }
}

/// Admits `n` requests of `who` on `POST /p`, keeping their tickets.
fn admit_n(l: &Arc<Limiter>, limits: &PrincipalLimits, who: &str, n: usize) -> Vec<Ticket> {
    (0..n)
        .map(|i| {
            l.admit(limits, "POST /p", who)
                .unwrap_or_else(|e| panic!("request {i} of {who} refused: {e:?}"))
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn the_bucket_admits_its_burst_then_one_per_interval() {
    let l = Arc::new(Limiter::default());
    let limits = rate(1.0, 3);
    drop(admit_n(&l, &limits, "alice", 3));
    let err = l.admit(&limits, "POST /p", "alice").unwrap_err();
    assert_eq!(
        err,
        Limited::NewKeys {
            retry_after: Duration::from_secs(1)
        }
    );
    advance(Duration::from_millis(999)).await;
    let err = l.admit(&limits, "POST /p", "alice").unwrap_err();
    assert_eq!(
        err,
        Limited::NewKeys {
            retry_after: Duration::from_millis(1)
        }
    );
    advance(Duration::from_millis(1)).await;
    drop(admit_n(&l, &limits, "alice", 1));
    assert!(l.admit(&limits, "POST /p", "alice").is_err());
    // A long pause refills to the burst, never beyond it.
    advance(Duration::from_secs(3600)).await;
    drop(admit_n(&l, &limits, "alice", 3));
    assert!(l.admit(&limits, "POST /p", "alice").is_err());
}

#[tokio::test(start_paused = true)]
async fn principals_and_routes_have_their_own_buckets() {
    let l = Arc::new(Limiter::default());
    let limits = rate(1.0, 2);
    drop(admit_n(&l, &limits, "alice", 2));
    assert!(l.admit(&limits, "POST /p", "alice").is_err());
    drop(admit_n(&l, &limits, "bob", 2));
    assert!(l.admit(&limits, "POST /other", "alice").is_ok());
    // The key cannot be forged by moving characters between route and principal.
    let a = Arc::new(Limiter::default());
    drop(a.admit(&rate(1.0, 1), "POST /p", "x").unwrap());
    assert!(a.admit(&rate(1.0, 1), "POST /px", "").is_ok());
}

#[tokio::test(start_paused = true)]
async fn answers_from_a_record_give_the_token_back() {
    let l = Arc::new(Limiter::default());
    let limits = rate(0.001, 1);
    for _ in 0..5 {
        let mut t = l.admit(&limits, "POST /p", "alice").unwrap();
        t.settle(&Answer::InFlight { retry_after_ms: 1 });
        t.settle(&Answer::Mismatch); // a second settle gives nothing more back
    }
    let mut t = l.admit(&limits, "POST /p", "alice").unwrap();
    t.settle(&Answer::Mismatch);
    drop(t);
    let mut t = l.admit(&limits, "POST /p", "alice").unwrap();
    t.settle(&Answer::Unavailable(StoreError::Timeout));
    drop(t);
    assert!(
        l.admit(&limits, "POST /p", "alice").is_err(),
        "a store failure keeps the token"
    );
    let l = Arc::new(Limiter::default());
    let mut t = l.admit(&limits, "POST /p", "bob").unwrap();
    t.settle(&Answer::Overloaded);
    assert!(l.admit(&limits, "POST /p", "bob").is_err());
}

#[tokio::test(start_paused = true)]
async fn in_flight_slots_are_held_until_the_ticket_drops() {
    let l = Arc::new(Limiter::default());
    let limits = in_flight(2);
    let mut held = admit_n(&l, &limits, "alice", 2);
    assert_eq!(
        l.admit(&limits, "POST /p", "alice").unwrap_err(),
        Limited::InFlight
    );
    // Settling (a replay) does not free the slot; only the end of the work does.
    held[0].settle(&Answer::Mismatch);
    assert!(l.admit(&limits, "POST /p", "alice").is_err());
    assert!(l.admit(&limits, "POST /p", "bob").is_ok());
    held.pop();
    let again = l.admit(&limits, "POST /p", "alice").unwrap();
    assert!(l.admit(&limits, "POST /p", "alice").is_err());
    drop((held, again));
    assert_eq!(l.tracked(), 0, "an idle pair is forgotten at once");
}

#[tokio::test(start_paused = true)]
async fn an_in_flight_refusal_takes_no_token() {
    let l = Arc::new(Limiter::default());
    let limits = PrincipalLimits {
        max_in_flight: NonZeroU32::new(1),
        new_keys: Some(KeyRate::new(0.001, 2).unwrap()),
    };
    let first = l.admit(&limits, "POST /p", "alice").unwrap();
    for _ in 0..10 {
        assert_eq!(
            l.admit(&limits, "POST /p", "alice").unwrap_err(),
            Limited::InFlight
        );
    }
    drop(first);
    drop(admit_n(&l, &limits, "alice", 1));
    assert!(matches!(
        l.admit(&limits, "POST /p", "alice").unwrap_err(),
        Limited::NewKeys { .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn limits_off_track_nothing() {
    let l = Arc::new(Limiter::with_capacity(0));
    let off = PrincipalLimits::default();
    assert!(off.is_off());
    let tickets = admit_n(&l, &off, "alice", 10_000);
    assert!(tickets.iter().all(|t| t.held.is_none()));
    assert_eq!(l.tracked(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_table_is_bounded_and_idle_pairs_are_swept() {
    let l = Arc::new(Limiter::with_capacity(4));
    let limits = rate(1.0, 1);
    // A flood of distinct principals: four are tracked, the rest admitted untracked.
    for i in 0..1000 {
        drop(l.admit(&limits, "POST /p", &format!("p{i}")).unwrap());
        assert!(l.tracked() <= 4);
    }
    assert_eq!(l.tracked(), 4);
    assert!(
        l.admit(&limits, "POST /p", "p0").is_err(),
        "tracked ones stay limited"
    );
    // Once their buckets refill, a full table is swept to make room.
    advance(Duration::from_secs(2)).await;
    drop(l.admit(&limits, "POST /p", "new").unwrap());
    assert_eq!(l.tracked(), 1);
    assert!(l.admit(&limits, "POST /p", "new").is_err());
    // The periodic sweep forgets idle pairs even when the table is not full.
    advance(SWEEP_EVERY).await;
    drop(l.admit(&limits, "POST /p", "other").unwrap());
    assert_eq!(l.tracked(), 1, "`new` is idle and forgotten");
}

#[test]
fn retry_after_is_whole_seconds_rounded_up() {
    let secs = |retry_after| match IdempotencyRejection::from(Limited::NewKeys { retry_after }) {
        IdempotencyRejection::PrincipalLimited {
            retry_after_secs, ..
        } => retry_after_secs,
        other => panic!("{other:?}"),
    };
    assert_eq!(secs(Duration::from_millis(1)), 1);
    assert_eq!(secs(Duration::from_millis(1000)), 1);
    assert_eq!(secs(Duration::from_millis(1001)), 2);
    assert_eq!(secs(Duration::ZERO), 1);
    let r = IdempotencyRejection::from(Limited::InFlight);
    assert_eq!(r.status(), 429);
    assert_eq!(r.anchor(), "principal-limited");
}

#[test]
fn rates_are_validated() {
    assert_eq!(KeyRate::new(2.5, 0).unwrap().burst().get(), 3);
    assert_eq!(KeyRate::new(0.5, 0).unwrap().burst().get(), 1);
    assert_eq!(KeyRate::new(10.0, 50).unwrap().burst().get(), 50);
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 0.0001] {
        assert!(KeyRate::new(bad, 1).is_err(), "{bad}");
    }
    assert!(KeyRate::new(1.0, 1_000_001).is_err());
    assert!(KeyRate::new(1e12, 0).is_ok());
}
