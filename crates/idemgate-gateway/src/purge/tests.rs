use std::num::NonZeroU32;
use std::time::Duration;

use idemgate_core::testing::{fp, request, unique_key};
use idemgate_core::{GaugedStore, IdempotencyStore, MemoryStore};

use super::*;

const DAY: Duration = Duration::from_secs(86_400);

/// `expired` records past their TTL and `live` ones, on a paused clock.
async fn seeded(expired: usize, live: usize) -> MemoryStore {
    let s = MemoryStore::new();
    for _ in 0..expired {
        let k = unique_key("alice");
        let req = request(&k, fp(1), Duration::from_secs(1), Duration::from_secs(1));
        s.insert_or_get(&req).await.unwrap();
    }
    tokio::time::advance(Duration::from_secs(5)).await;
    for _ in 0..live {
        s.insert_or_get(&request(&unique_key("bob"), fp(1), DAY, DAY))
            .await
            .unwrap();
    }
    s
}

fn opts(batch: u32, max_rate: Option<u32>, dry_run: bool) -> PurgeOptions {
    PurgeOptions {
        batch: NonZeroU32::new(batch).unwrap(),
        max_rate: max_rate.and_then(NonZeroU32::new),
        dry_run,
    }
}

/// Records what a run reported.
#[derive(Default)]
struct Seen {
    total: Option<Option<u64>>,
    advances: Vec<u64>,
    finished: Option<u64>,
}

impl Progress for Seen {
    fn wants_total(&self) -> bool {
        true
    }
    fn start(&mut self, total: Option<u64>) {
        self.total = Some(total);
    }
    fn advance(&mut self, deleted: u64) {
        self.advances.push(deleted);
    }
    fn finish(&mut self, deleted: u64) {
        self.finished = Some(deleted);
    }
}

#[tokio::test(start_paused = true)]
async fn a_run_deletes_the_expired_in_batches_and_reports_progress() {
    let s = seeded(25, 4).await;
    let mut seen = Seen::default();
    let report = run_once(&s, &opts(10, None, false), &mut seen)
        .await
        .unwrap();
    assert_eq!((report.deleted, report.batches), (25, 3));
    assert_eq!(seen.total, Some(Some(25)));
    assert_eq!(seen.advances, [10, 20, 25]);
    assert_eq!(seen.finished, Some(25));
    let g = s.gauges().await.unwrap();
    assert_eq!((g.records(), g.expired), (4, Some(0)));
}

#[tokio::test(start_paused = true)]
async fn a_dry_run_counts_and_deletes_nothing() {
    let s = seeded(12, 3).await;
    let report = run_once(&s, &opts(5, None, true), &mut QuietProgress)
        .await
        .unwrap();
    assert_eq!((report.deleted, report.would_delete), (0, Some(12)));
    assert!(report
        .summary()
        .contains("12 expired records would be purged"));
    assert_eq!(s.gauges().await.unwrap().records(), 15);
}

#[tokio::test(start_paused = true)]
async fn max_rate_paces_the_batches() {
    // 30 rows at 10 rows/s: batches of 10, and the third cannot start before 2 s of the
    // (paused, virtual) clock have passed.
    let s = seeded(30, 0).await;
    let started = tokio::time::Instant::now();
    let report = run_once(&s, &opts(1000, Some(10), false), &mut QuietProgress)
        .await
        .unwrap();
    assert_eq!((report.deleted, report.batches), (30, 4));
    assert!(started.elapsed() >= Duration::from_secs(3), "paced");
    let unpaced = seeded(30, 0).await;
    let started = tokio::time::Instant::now();
    run_once(&unpaced, &opts(10, None, false), &mut QuietProgress)
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(1), "not paced");
}

#[test]
fn the_bar_is_for_terminals_only() {
    assert!(wants_bar(true, Some("xterm-256color")));
    assert!(wants_bar(true, None));
    assert!(
        !wants_bar(false, Some("xterm-256color")),
        "a pipe gets log lines"
    );
    assert!(!wants_bar(true, Some("dumb")));
}

#[test]
fn each_cause_is_shown_once() {
    let chain = [
        "store error",
        "PostgreSQL request failed: relation \"t\" does not exist",
        "relation \"t\" does not exist",
    ]
    .map(String::from);
    assert_eq!(
        join_chain(chain),
        "store error: PostgreSQL request failed: relation \"t\" does not exist"
    );
    let distinct = ["a", "b", "c"].map(String::from);
    assert_eq!(join_chain(distinct), "a: b: c");
}
