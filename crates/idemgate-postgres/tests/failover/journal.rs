//! The forward journal against a real asynchronous failover: records the standby never got
//! are written back by the store that acquired them, and a store that holds no entry for a
//! key refuses it until they are, never running it again.

use std::path::PathBuf;
use std::time::Duration;

use idemgate_core::testing::{fp, request, response, unique_key};
use idemgate_core::{
    IdempotencyRecord, IdempotencyStore, InsertOutcome, LeaseToken, RecordState, ScopedKey,
    StoreError, StoredResponse,
};
use idemgate_postgres::{ForwardJournalOptions, PostgresOptions, PostgresStore};
use tokio::time::Instant;

use crate::cluster::Cluster;
use crate::{eventually, replicated, DAY};

/// How long new keys stay refused after a failover in these cases.
const GRACE: Duration = Duration::from_secs(3);

/// A journal file in a fresh temporary directory (kept until the case ends).
pub(crate) struct JournalDir(tempfile::TempDir);

impl JournalDir {
    pub(crate) fn new() -> Self {
        Self(tempfile::tempdir().expect("tempdir"))
    }

    pub(crate) fn options(&self, name: &str) -> ForwardJournalOptions {
        let mut options = ForwardJournalOptions::new(self.path(name));
        options.failover_grace = GRACE;
        options
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
}

/// A store on `url` with a journal, the table migrated.
pub(crate) async fn journaled(url: &str, journal: ForwardJournalOptions) -> PostgresStore {
    let options = PostgresOptions::new().with_forward_journal(Some(journal));
    let store = PostgresStore::connect_with(url, &options)
        .await
        .expect("connect with a journal");
    store.migrate().await.expect("migrate");
    store
}

/// Acquires and completes `n` keys on `store`, each with its own response; returns them.
async fn complete_keys(store: &PostgresStore, n: usize) -> Vec<(ScopedKey, StoredResponse)> {
    let mut done = Vec::new();
    for i in 0..n {
        let key = unique_key("alice");
        let req = request(&key, fp(1), Duration::from_secs(30), DAY);
        let InsertOutcome::Inserted(lease) = store.insert_or_get(&req).await.expect("insert")
        else {
            panic!("a fresh key is inserted");
        };
        let answer = response(100 + i);
        store.complete(&lease, &answer).await.expect("complete");
        done.push((key, answer));
    }
    done
}

/// What `store` answers a retry of `key` with, until it is a record: refusals meanwhile
/// are allowed, an insert (a second run) never is. Returns the record and how many
/// refusals came first.
pub(crate) async fn retried(store: &PostgresStore, key: &ScopedKey) -> (IdempotencyRecord, u32) {
    let refused = std::cell::Cell::new(0);
    let record = eventually(Duration::from_secs(40), "the retry is answered", || {
        let req = request(key, fp(1), Duration::from_secs(30), DAY);
        let refused = &refused;
        async move {
            match store.insert_or_get(&req).await {
                Ok(InsertOutcome::Existing { record, .. }) => Some(record),
                Ok(InsertOutcome::Inserted(lease)) => {
                    panic!(
                        "{key:?} ran again after the failover (fence {})",
                        lease.fence
                    )
                }
                Err(StoreError::Refused(_) | StoreError::Unavailable(_)) => {
                    refused.set(refused.get() + 1);
                    None
                }
                Err(e) => panic!("{key:?}: {e:?}"),
            }
        }
    })
    .await;
    (record, refused.get())
}

/// Loses what the standby had not received, then promotes it.
pub(crate) async fn lossy_failover(c: &Cluster) {
    c.kill_primary().await;
    c.drop_receiver().await;
    c.promote().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_a_failover_lost_are_restored_and_never_run_again() {
    let Some(c) = Cluster::start("async") else {
        return;
    };
    let url = c.url(&[c.primary, c.standby]);
    let dir = JournalDir::new();
    let a = journaled(&url, dir.options("a.journal")).await;
    let b = journaled(&url, dir.options("b.journal")).await;
    let kept = complete_keys(&a, 3).await;
    replicated(c.standby, &a.table_name(), 3).await;

    c.stall().await;
    let lost_a = complete_keys(&a, 20).await;
    let lost_b = complete_keys(&b, 5).await;
    let running = unique_key("alice");
    let req = request(&running, fp(1), Duration::from_secs(30), DAY);
    let InsertOutcome::Inserted(lease) = a.insert_or_get(&req).await.expect("insert") else {
        panic!("a fresh key is inserted");
    };
    lossy_failover(&c).await;
    let promoted = Instant::now();
    // A store with no journal (nor gate) inserts one of the lost keys on the new primary
    // first, as a gateway's insert does when its gate closes between its check and its
    // statement: the journal's record replaces it. (When a store's watcher saw the failover
    // first, the record is restored already: the retries below check it all the same.)
    let plain = crate::store(&c.url(&[c.standby])).await;
    let orphan_req = request(&lost_a[0].0, fp(1), Duration::from_secs(30), DAY);
    let orphan = match plain.insert_or_get(&orphan_req).await.expect("insert") {
        InsertOutcome::Inserted(orphan) => Some(orphan),
        InsertOutcome::Existing { .. } => {
            println!("the restore came before the orphan insert");
            None
        }
    };

    // Every retry goes to the other store first: it holds no entry for the key.
    let mut refusals = 0;
    for ((key, answer), store) in lost_a
        .iter()
        .map(|k| (k, &b))
        .chain(lost_b.iter().map(|k| (k, &a)))
    {
        let (record, refused) = retried(store, key).await;
        refusals += refused;
        assert_eq!(record.state, RecordState::Completed, "{key:?}");
        assert_eq!(
            record.response.as_ref(),
            Some(answer),
            "{key:?}: the first answer"
        );
    }
    if let Some(orphan) = orphan {
        let released = plain.release(&orphan).await;
        assert!(
            matches!(released, Err(StoreError::LeaseLost)),
            "{released:?}"
        );
    }
    println!(
        "restored and replayed {:?} after the promotion, {refusals} refusals first",
        promoted.elapsed()
    );
    assert!(
        refusals > 0,
        "the other store refused until the journals restored"
    );
    for (key, answer) in &kept {
        let (record, _) = retried(&b, key).await;
        assert_eq!(record.response.as_ref(), Some(answer));
    }

    // The key still running in `a` was restored with its lease live: its outcome lands.
    let (record, _) = retried(&b, &running).await;
    assert_eq!(record.state, RecordState::InProgress);
    a.complete(&lease, &response(7))
        .await
        .expect("the holder completes after the failover");

    // After the grace, fresh keys run again, on both.
    for store in [&a, &b] {
        let fresh = request(&unique_key("alice"), fp(1), Duration::from_secs(30), DAY);
        let inserted = eventually(
            Duration::from_secs(20),
            "fresh keys are accepted",
            || async {
                matches!(
                    store.insert_or_get(&fresh).await,
                    Ok(InsertOutcome::Inserted(_))
                )
                .then_some(())
            },
        );
        inserted.await;
    }
    assert!(promoted.elapsed() >= GRACE, "not before the grace passed");
    assert_eq!(a.timeline(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_process_restores_with_lapsed_leases_and_refuses_the_old_primary() {
    let Some(c) = Cluster::start("async") else {
        return;
    };
    let url = c.url(&[c.primary, c.standby]);
    let dir = JournalDir::new();
    let a = journaled(&url, dir.options("a.journal")).await;
    let b = journaled(&url, dir.options("b.journal")).await;
    c.stall().await;
    let done = complete_keys(&a, 4).await;
    let running = unique_key("alice");
    let req = request(&running, fp(1), Duration::from_secs(30), DAY);
    assert!(matches!(
        a.insert_or_get(&req).await,
        Ok(InsertOutcome::Inserted(_))
    ));
    drop(a); // the process dies with the primary
    lossy_failover(&c).await;

    // Until it starts again, its keys are refused by the other store, then (after the
    // grace) absent: that is the residual window the docs state.
    let probe = request(&done[0].0, fp(1), Duration::from_secs(30), DAY);
    let early = eventually(
        Duration::from_secs(10),
        "the other store reconnects",
        || async {
            match b.insert_or_get(&probe).await {
                Err(StoreError::Unavailable(_)) => None,
                answer => Some(answer),
            }
        },
    )
    .await;
    assert!(matches!(early, Err(StoreError::Refused(_))), "{early:?}");

    // It starts again on the new primary (the first host of its URL is dead).
    let a = eventually(
        Duration::from_secs(10),
        "the journal file is free",
        || async {
            let options =
                PostgresOptions::new().with_forward_journal(Some(dir.options("a.journal")));
            PostgresStore::connect_with(&url, &options).await.ok()
        },
    )
    .await;
    for (key, answer) in &done {
        let (record, _) = retried(&b, key).await;
        assert_eq!(record.response.as_ref(), Some(answer), "{key:?}");
    }
    let (record, _) = retried(&b, &running).await;
    assert_eq!(record.state, RecordState::InProgress);
    let now = idemgate_core::record::now_millis();
    let lease_end = record.lease_expires_at.expect("a lease");
    assert!(
        lease_end <= now + 1_000,
        "restored lapsed: {lease_end} vs {now}"
    );
    // A route that opts in may take it over, once the grace has passed.
    let taken = eventually(Duration::from_secs(10), "the grace passes", || async {
        match a
            .take_over(&record, LeaseToken::random(), Duration::from_secs(5))
            .await
        {
            Err(StoreError::Refused(_)) => None,
            taken => Some(taken.expect("take over")),
        }
    });
    assert!(taken.await.is_some(), "the lapsed lease is taken over");
    drop(a);

    // The killed primary brought back read-write on timeline 1: a process restarted with
    // its journal refuses it (a running one refuses it by its timeline already).
    c.restart_old_primary().await;
    let old = c.url(&[c.primary]);
    let options = PostgresOptions::new().with_forward_journal(Some(dir.options("a.journal")));
    let refused = eventually(
        Duration::from_secs(10),
        "the journal file is free",
        || async {
            match PostgresStore::connect_with(&old, &options).await {
                Err(e) if e.to_string().contains("in use") => None,
                other => Some(other),
            }
        },
    )
    .await;
    let err = refused.expect_err("a former primary is refused");
    let text = err.to_string();
    assert!(
        text.contains("a.journal") && text.contains("timeline"),
        "{text}"
    );
}

#[tokio::test]
async fn a_journal_file_is_held_by_one_process() {
    let Ok(url) = std::env::var("IDEMGATE_TEST_DATABASE_URL") else {
        println!("skipping: IDEMGATE_TEST_DATABASE_URL is not set");
        return;
    };
    let dir = JournalDir::new();
    let options = PostgresOptions::new().with_forward_journal(Some(dir.options("one.journal")));
    let first = PostgresStore::connect_with(&url, &options)
        .await
        .expect("first");
    let err = PostgresStore::connect_with(&url, &options)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("in use by another process"),
        "{err}"
    );
    assert!(err.to_string().contains("one.journal"), "{err}");
    drop(first);
    let dir_as_file =
        PostgresOptions::new().with_forward_journal(Some(ForwardJournalOptions::new(dir.0.path())));
    let err = PostgresStore::connect_with(&url, &dir_as_file)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("forward journal"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_are_dropped_once_a_standby_replayed_them_or_at_the_window() {
    let Some(c) = Cluster::start("async") else {
        return;
    };
    let url = c.url(&[c.primary]);
    let dir = JournalDir::new();
    let mut options = dir.options("a.journal");
    options.window = Duration::from_secs(4);
    let a = journaled(&url, options).await;
    let len = || async {
        a.forward_journal_len()
            .await
            .expect("len")
            .expect("a journal")
    };
    complete_keys(&a, 10).await;
    eventually(
        Duration::from_secs(10),
        "a standby confirms them",
        || async { (len().await == 0).then_some(()) },
    )
    .await;

    c.stall().await;
    complete_keys(&a, 5).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        len().await,
        5,
        "kept while the standby has not replayed them"
    );
    // An acquired key without an outcome is kept even once replayed: its outcome is not.
    let running = request(&unique_key("alice"), fp(1), Duration::from_secs(30), DAY);
    assert!(matches!(
        a.insert_or_get(&running).await,
        Ok(InsertOutcome::Inserted(_))
    ));
    eventually(Duration::from_secs(10), "dropped at the window", || async {
        (len().await == 0).then_some(())
    })
    .await;
    c.resume().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_started_in_the_grace_waits_and_an_outcome_the_failover_refused_lands() {
    let Some(c) = Cluster::start("async") else {
        return;
    };
    // A virtual IP: the store follows the failover only when it opens a new connection, so
    // the outcome below reaches the new primary before any restore.
    let vip = crate::relay::Relay::start(c.primary).await;
    let url = c.url(&[vip.port]);
    let dir = JournalDir::new();
    let grace = Duration::from_secs(8);
    let with_grace = |name: &str| {
        let mut options = dir.options(name);
        options.failover_grace = grace;
        options
    };
    let a = journaled(&url, with_grace("a.journal")).await;
    // A failover of another database on the same timeline number, long ago (carried over
    // by a dump and restore): it must not shorten this one's grace.
    let failovers = format!("\"{}_failovers\"", a.table_name());
    let old = format!("INSERT INTO {failovers} VALUES (12345, 2, now() - interval '30 days')");
    sqlx::raw_sql(&old)
        .execute(a.pool())
        .await
        .expect("old row");
    replicated(c.standby, &format!("{}_failovers", a.table_name()), 1).await;

    c.stall().await;
    let running = unique_key("alice");
    let req = request(&running, fp(1), Duration::from_secs(30), DAY);
    let InsertOutcome::Inserted(lease) = a.insert_or_get(&req).await.expect("insert") else {
        panic!("a fresh key is inserted");
    };
    lossy_failover(&c).await;
    vip.point_to(c.standby);
    let promoted = Instant::now();

    // Its outcome, written after the failover lost its record: refused by the new primary
    // until the journal restores the record, then landed.
    let answer = response(9);
    eventually(Duration::from_secs(40), "the outcome lands", || async {
        match a.complete(&lease, &answer).await {
            Err(StoreError::Unavailable(_) | StoreError::Timeout) => None,
            done => {
                done.expect("the outcome lands after the restore");
                Some(())
            }
        }
    })
    .await;

    // A process started now, with a journal of its own that saw no failover, waits for the
    // grace all the same.
    let id = a.system_identifier().unwrap_or(0) as i64;
    let recorded = format!("SELECT count(*) FROM {failovers} WHERE system_identifier = {id}");
    eventually(
        Duration::from_secs(10),
        "the failover is recorded",
        || async {
            let n: i64 = sqlx::query_scalar(&recorded)
                .fetch_one(a.pool())
                .await
                .ok()?;
            (n == 1).then_some(())
        },
    )
    .await;
    let d = journaled(&url, with_grace("d.journal")).await;
    let fresh = request(&unique_key("alice"), fp(1), Duration::from_secs(30), DAY);
    let early = d.insert_or_get(&fresh).await;
    assert!(
        promoted.elapsed() < grace,
        "the case ran too slowly to test the grace"
    );
    assert!(matches!(early, Err(StoreError::Refused(_))), "{early:?}");
    let (record, _) = retried(&d, &running).await;
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!(record.response.as_ref(), Some(&answer));
    eventually(
        Duration::from_secs(20),
        "fresh keys after the grace",
        || async {
            matches!(
                d.insert_or_get(&fresh).await,
                Ok(InsertOutcome::Inserted(_))
            )
            .then_some(())
        },
    )
    .await;
    assert!(promoted.elapsed() >= grace - Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_process_on_a_promoted_server_waits_one_grace() {
    let Some(c) = Cluster::start("async") else {
        return;
    };
    let plain = crate::store(&c.url(&[c.primary])).await;
    complete_keys(&plain, 1).await;
    c.kill_primary().await;
    c.promote().await;
    // No process with a journal has seen the failover yet: the first to start records it.
    let dir = JournalDir::new();
    let d = journaled(&c.url(&[c.standby]), dir.options("d.journal")).await;
    let fresh = request(&unique_key("alice"), fp(1), Duration::from_secs(30), DAY);
    let early = d.insert_or_get(&fresh).await;
    assert!(matches!(early, Err(StoreError::Refused(_))), "{early:?}");
    eventually(
        Duration::from_secs(20),
        "fresh keys after the grace",
        || async {
            matches!(
                d.insert_or_get(&fresh).await,
                Ok(InsertOutcome::Inserted(_))
            )
            .then_some(())
        },
    )
    .await;
}
