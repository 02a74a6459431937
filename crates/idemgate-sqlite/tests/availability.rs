//! [`SqliteStore`] when the database is busy or gone: a write lock held by another process,
//! a full command queue, deleted files. Outcome writes wait and land; only new work is
//! refused; replays and `409`s never wait for the write lock.

mod common;

use std::error::Error as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use common::{insert, sqlite_source, TempStore, DAY, LONG};
use idemgate_core::testing::{existing, fp, inserted, request, response, unique_key};
use idemgate_core::{GaugedStore, IdempotencyStore, LeaseToken, RecordState, StoreError};
use idemgate_sqlite::{SqliteOptions, SqliteStoreError};
use tokio::time::Instant;

/// Another process: takes the write lock on `path` (`BEGIN IMMEDIATE`), holds it for
/// `hold`, then commits and sets the flag. Returns once the lock is taken.
fn hold_write_lock(path: PathBuf, hold: Duration) -> (JoinHandle<()>, Arc<AtomicBool>) {
    let released = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&released);
    let (locked_tx, locked) = mpsc::channel();
    let holder = std::thread::spawn(move || {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.busy_timeout(Duration::from_secs(5)).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        locked_tx.send(()).unwrap();
        std::thread::sleep(hold);
        flag.store(true, Ordering::SeqCst);
        conn.execute_batch("COMMIT").unwrap();
    });
    locked.recv().unwrap();
    (holder, released)
}

fn assert_queue_full<T: std::fmt::Debug>(r: Result<T, StoreError>, capacity: usize) {
    let err = r.unwrap_err();
    assert!(matches!(err, StoreError::Refused(_)), "{err:?}");
    assert!(
        matches!(sqlite_source(&err), Some(SqliteStoreError::QueueFull { capacity: c }) if *c == capacity),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locked_database_is_unavailable_then_recovers() {
    let s = TempStore::open(SqliteOptions::default().with_busy_timeout(Duration::from_millis(100)));
    let done = unique_key("alice");
    let lease = insert(&s, &done).await;
    s.complete(&lease, &response(5)).await.unwrap();

    let raw = s.raw();
    raw.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let k = unique_key("alice");
    let started = Instant::now();
    let err = s
        .insert_or_get(&request(&k, fp(1), LONG, DAY))
        .await
        .unwrap_err();
    // A definite answer (nothing written): the lifecycle starts no follow-up for it.
    assert!(matches!(err, StoreError::Refused(_)), "{err:?}");
    assert!(!err.outcome_unknown());
    let source = sqlite_source(&err).expect("the sqlite error is the source");
    assert!(source.is_unavailable());
    assert!(source.source().is_some(), "the rusqlite error is kept");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "busy_timeout bounds the wait"
    );
    // writers wait, readers do not (WAL): replays keep working
    assert!(s.get(&done).await.unwrap().is_some());
    existing(
        s.insert_or_get(&request(&done, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    assert!(
        s.get(&k).await.unwrap().is_none(),
        "the failed insert wrote nothing"
    );

    raw.execute_batch("COMMIT").unwrap();
    let lease = insert(&s, &k).await;
    s.complete(&lease, &response(1)).await.unwrap();
}

/// A full queue refuses new work (an insert that reaches the writer, a take-over) at once,
/// with the queue's capacity in the error; everything else waits for room and runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_refuses_new_work_only() {
    let options = SqliteOptions::default()
        .with_queue_capacity(1)
        .with_busy_timeout(Duration::from_secs(5));
    let s = Arc::new(TempStore::open(options));
    let held = insert(&*s, &unique_key("a")).await;
    let snapshot = s.get(&held.key).await.unwrap().unwrap();
    let raw = s.raw();
    raw.execute_batch("BEGIN IMMEDIATE").unwrap();
    let spawn_insert = || {
        let s = s.clone();
        tokio::spawn(async move {
            s.insert_or_get(&request(&unique_key("a"), fp(1), LONG, DAY))
                .await
        })
    };
    let running = spawn_insert(); // taken by the thread, waiting for the lock
    tokio::time::sleep(Duration::from_millis(100)).await;
    let queued = spawn_insert(); // fills the queue
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_queue_full(
        s.insert_or_get(&request(&unique_key("a"), fp(1), LONG, DAY))
            .await,
        1,
    );
    assert_queue_full(s.take_over(&snapshot, LeaseToken::random(), LONG).await, 1);
    // these wait for room instead
    let ping = tokio::spawn({
        let s = s.clone();
        async move { s.ping().await }
    });
    let renew = tokio::spawn({
        let (s, held) = (s.clone(), held.clone());
        async move { s.renew(&held, LONG).await }
    });
    raw.execute_batch("COMMIT").unwrap();
    inserted(running.await.unwrap().unwrap());
    inserted(queued.await.unwrap().unwrap());
    ping.await.unwrap().unwrap();
    renew.await.unwrap().unwrap();
    s.complete(&held, &response(1)).await.unwrap();
}

/// Many in-flight requests finish at once while another process holds the write lock and
/// the queue is far too small: every renewal and every completion waits for room and lands
/// (none is refused, so no key would run twice), while new inserts are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_queue_never_refuses_outcome_writes() {
    let options = SqliteOptions::default()
        .with_queue_capacity(4)
        .with_max_batch(4)
        .with_busy_timeout(Duration::from_secs(10));
    let s = Arc::new(TempStore::open(options));
    let mut leases = Vec::new();
    for _ in 0..64 {
        leases.push(insert(&*s, &unique_key("alice")).await);
    }
    let snapshot = s.get(&leases[0].key).await.unwrap().unwrap();
    // Held for less than the busy timeout: the writer's BEGIN waits, then goes on.
    let (holder, _) = hold_write_lock(s.db_path(), Duration::from_millis(1500));
    let tasks: Vec<_> = leases
        .iter()
        .enumerate()
        .map(|(i, lease)| {
            let (s, lease) = (s.clone(), lease.clone());
            tokio::spawn(async move {
                s.renew(&lease, LONG).await?;
                s.complete(&lease, &response(i)).await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // the queue is full of outcome writes: new work is refused, never queued behind them
    assert_queue_full(
        s.insert_or_get(&request(&unique_key("bob"), fp(1), LONG, DAY))
            .await,
        4,
    );
    assert_queue_full(s.take_over(&snapshot, LeaseToken::random(), LONG).await, 4);
    for (i, t) in tasks.into_iter().enumerate() {
        t.await
            .unwrap()
            .unwrap_or_else(|e| panic!("outcome {i} refused: {e:?}"));
    }
    holder.join().unwrap();
    for (i, lease) in leases.iter().enumerate() {
        let rec = s.get(&lease.key).await.unwrap().expect("record kept");
        assert_eq!(rec.state, RecordState::Completed, "record {i}");
        assert_eq!(rec.response, Some(response(i)));
    }
}

/// While another process holds the write lock, and the store thread is stuck behind it with
/// an insert, a replay and a `409` are answered from the read path: `insert_or_get` of a
/// live key returns `Existing` before the lock holder lets go (it holds for 3 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_do_not_wait_for_the_write_lock() {
    let s = Arc::new(TempStore::open(
        SqliteOptions::default().with_busy_timeout(Duration::from_secs(10)),
    ));
    let done = unique_key("alice");
    let lease = insert(&*s, &done).await;
    s.complete(&lease, &response(7)).await.unwrap();
    let running = unique_key("alice");
    let holder_lease = insert(&*s, &running).await;

    let (holder, released) = hold_write_lock(s.db_path(), Duration::from_secs(3));
    let fresh = unique_key("alice");
    let blocked = tokio::spawn({
        let (s, fresh) = (s.clone(), fresh.clone());
        async move { s.insert_or_get(&request(&fresh, fp(1), LONG, DAY)).await }
    });
    // Lets the fresh insert reach the store thread first (the answers below never depend
    // on it).
    tokio::time::sleep(Duration::from_millis(200)).await;

    let (rec, _) = existing(
        s.insert_or_get(&request(&done, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    assert_eq!(rec.state, RecordState::Completed);
    assert_eq!(rec.response, Some(response(7)));
    let (rec, now) = existing(
        s.insert_or_get(&request(&running, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
    assert_eq!(rec.state, RecordState::InProgress);
    assert_eq!(rec.lease_token, Some(holder_lease.token));
    assert!(now < rec.lease_expires_at.unwrap());
    assert_eq!(
        s.get(&done).await.unwrap().unwrap().response,
        Some(response(7))
    );
    assert!(
        !released.load(Ordering::SeqCst),
        "answered while the write lock was still held"
    );

    holder.join().unwrap();
    inserted(blocked.await.unwrap().unwrap());
    s.complete(&holder_lease, &response(1)).await.unwrap();
}

/// Deleting the database files under a running store: every operation answers
/// `Unavailable` (the file is gone), none panics, and closing still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_files_make_the_store_unavailable() {
    let s = TempStore::open(SqliteOptions::default());
    let done = unique_key("alice");
    let lease = insert(&s, &done).await;
    s.complete(&lease, &response(3)).await.unwrap();
    let held = insert(&s, &unique_key("alice")).await;
    let snapshot = s.get(&held.key).await.unwrap().unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let mut path = s.db_path().into_os_string();
        path.push(suffix);
        let _ = std::fs::remove_file(path);
    }

    fn gone<T: std::fmt::Debug>(r: Result<T, StoreError>, what: &str) {
        let err = r.unwrap_err();
        assert!(matches!(err, StoreError::Refused(_)), "{what}: {err:?}");
        assert!(
            matches!(sqlite_source(&err), Some(SqliteStoreError::FileGone { .. })),
            "{what}: {err:?}"
        );
    }
    let fresh = request(&unique_key("alice"), fp(1), LONG, DAY);
    gone(s.insert_or_get(&fresh).await, "insert");
    gone(
        s.insert_or_get(&request(&done, fp(1), LONG, DAY)).await,
        "replay",
    );
    gone(s.get(&done).await, "get");
    gone(
        s.take_over(&snapshot, LeaseToken::random(), LONG).await,
        "take_over",
    );
    gone(s.renew(&held, LONG).await, "renew");
    gone(s.complete(&held, &response(1)).await, "complete");
    gone(s.fail(&held).await, "fail");
    gone(s.release(&held).await, "release");
    gone(s.purge_expired(1.try_into().unwrap()).await, "purge");
    gone(s.ping().await, "ping");
    gone(s.gauges().await, "stats");
    let TempStore { store, dir } = s;
    store.close().await;
    drop(dir);
}
