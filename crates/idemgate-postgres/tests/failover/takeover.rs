//! A take-over the failover lost, against the outcome its earlier holder wrote after it:
//! the take-over's outcome is the one answered first, so it is the one replayed (found by
//! the protocol model, `crates/idemgate-model`).

use std::time::Duration;

use idemgate_core::testing::{fp, request, response, unique_key};
use idemgate_core::{IdempotencyStore, InsertOutcome, LeaseToken, RecordState, StoreError};

use crate::cluster::Cluster;
use crate::journal::{journaled, lossy_failover, retried, JournalDir};
use crate::{eventually, replicated, DAY};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_take_over_s_outcome_wins_over_a_late_one_of_the_fence_before() {
    let Some(c) = Cluster::start("async") else {
        return;
    };
    let url = c.url(&[c.primary, c.standby]);
    let dir = JournalDir::new();
    let with_grace = |name: &str| {
        let mut options = dir.options(name);
        options.failover_grace = Duration::from_secs(10);
        options
    };
    let (a_options, b_options) = (with_grace("a.journal"), with_grace("b.journal"));
    let a = journaled(&url, a_options).await;
    let b = journaled(&url, b_options.clone()).await;

    // `a` acquires the key under a short lease; the standby has it, in progress.
    let key = unique_key("alice");
    let req = request(&key, fp(1), Duration::from_millis(500), DAY);
    let InsertOutcome::Inserted(first) = a.insert_or_get(&req).await.expect("insert") else {
        panic!("a fresh key is inserted");
    };
    replicated(c.standby, &a.table_name(), 1).await;

    // Its lease lapses; `b` takes it over (a route that opts in), runs it and answers its
    // client: that is the outcome answered first. The standby gets none of it.
    c.stall().await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let seen = b.get(&key).await.expect("get").expect("the record");
    let taken = b
        .take_over(&seen, LeaseToken::random(), Duration::from_secs(30))
        .await
        .expect("take over")
        .expect("the lapsed lease is taken over");
    assert_eq!(taken.fence, 2);
    let answered = response(22);
    b.complete(&taken, &answered).await.expect("complete");
    drop(b); // the process dies with the primary
    lossy_failover(&c).await;

    // `a`'s late outcome lands on the new primary, which holds its fence.
    let late = response(11);
    eventually(
        Duration::from_secs(40),
        "the late outcome lands",
        || async {
            match a.complete(&first, &late).await {
                Err(StoreError::Unavailable(_) | StoreError::Timeout) => None,
                done => {
                    done.expect("the late outcome lands");
                    Some(())
                }
            }
        },
    )
    .await;
    // While the failover is handled, a retry is not answered with it.
    let retry = request(&key, fp(1), Duration::from_secs(30), DAY);
    match a.insert_or_get(&retry).await {
        Err(StoreError::Refused(e)) => assert!(e.to_string().contains("held"), "{e}"),
        other => panic!("a retry during the grace: {other:?}"),
    }
    // Nor a waiter's (or an operator's) read of it.
    match a.get(&key).await {
        Err(StoreError::Refused(e)) => assert!(e.to_string().contains("held"), "{e}"),
        other => panic!("a read during the grace: {other:?}"),
    }

    // `b` starts again within the grace and restores its take-over over the late outcome.
    let b = eventually(Duration::from_secs(10), "the journal file is free", || {
        let options = b_options.clone();
        let url = url.clone();
        async move {
            let options =
                idemgate_postgres::PostgresOptions::new().with_forward_journal(Some(options));
            idemgate_postgres::PostgresStore::connect_with(&url, &options)
                .await
                .ok()
        }
    })
    .await;
    for store in [&a, &b] {
        let (record, _) = retried(store, &key).await;
        assert_eq!(record.state, RecordState::Completed);
        assert_eq!(record.fence, 2, "the take-over's record");
        assert_eq!(
            record.response.as_ref(),
            Some(&answered),
            "the first answer"
        );
    }
}
