use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use rusqlite::Connection;

use crate::checkpoint::WRITER_AUTOCHECKPOINT_PAGES;
use crate::options::{SqliteOptions, Synchronous};
use crate::store::{Admission, SqliteStore};
use crate::worker::Access;

/// Which thread ran each attempt of an insert into `t`, and its result.
type Attempts = Arc<Mutex<Vec<(Option<String>, bool)>>>;

fn open(dir: &tempfile::TempDir, synchronous: Synchronous) -> SqliteStore {
    let path = dir.path().join("w.db");
    let store = SqliteStore::open(
        &path,
        SqliteOptions::default().with_synchronous(synchronous),
    )
    .unwrap();
    Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE t (x INTEGER)")
        .unwrap();
    store
}

/// One `INSERT INTO t` through the single-statement write path, each attempt recorded.
async fn insert(store: &SqliteStore, attempts: &Attempts) -> usize {
    let seen = Arc::clone(attempts);
    let op = move |c: &Connection| {
        let result = c.execute("INSERT INTO t VALUES (1)", []);
        let name = thread::current().name().map(str::to_owned);
        seen.lock().unwrap().push((name, result.is_ok()));
        Ok(result?)
    };
    store
        .write_one(Admission::Refuse, Access::Write, op)
        .await
        .unwrap()
}

/// Another connection holding the write lock for 300 ms (as another process would).
fn hold_write_lock(dir: &tempfile::TempDir) -> thread::JoinHandle<()> {
    let other = Connection::open(dir.path().join("w.db")).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        other.execute_batch("COMMIT").unwrap();
    })
}

fn rows(dir: &tempfile::TempDir) -> i64 {
    let c = Connection::open(dir.path().join("w.db")).unwrap();
    c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn an_idle_writer_runs_a_write_on_the_caller_s_thread() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, Synchronous::Normal);
    let attempts = Attempts::default();
    assert_eq!(insert(&store, &attempts).await, 1);
    let caller = thread::current().name().map(str::to_owned);
    assert_eq!(*attempts.lock().unwrap(), [(caller, true)]);
    store.close().await;
    assert_eq!(rows(&dir), 1);
}

#[tokio::test]
async fn a_write_that_would_wait_for_a_lock_waits_on_the_store_thread_and_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, Synchronous::Normal);
    let holder = hold_write_lock(&dir);
    let attempts = Attempts::default();
    assert_eq!(insert(&store, &attempts).await, 1);
    holder.join().unwrap();
    let caller = thread::current().name().map(str::to_owned);
    let store_thread = Some("idemgate-sqlite".to_owned());
    assert_eq!(
        *attempts.lock().unwrap(),
        [(caller, false), (store_thread, true)],
        "busy on the caller's thread (nothing written), then waited for on the store thread"
    );
    store.close().await;
    assert_eq!(rows(&dir), 1, "the write ran once");
}

#[tokio::test]
async fn a_commit_that_fsyncs_never_runs_on_the_caller_s_thread() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, Synchronous::Full);
    let attempts = Attempts::default();
    assert_eq!(insert(&store, &attempts).await, 1);
    let store_thread = Some("idemgate-sqlite".to_owned());
    assert_eq!(*attempts.lock().unwrap(), [(store_thread, true)]);
    store.close().await;
}

/// Once the WAL holds the safety-net checkpoint's frames, writes go to the store thread,
/// whose commit checkpoints, and come back to the caller's thread once the WAL restarted.
#[tokio::test]
async fn a_long_wal_sends_writes_to_the_store_thread_until_it_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, Synchronous::Normal);
    let big = |c: &Connection| {
        let pages = WRITER_AUTOCHECKPOINT_PAGES + 100;
        let sql = format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {pages}) \
             INSERT INTO t SELECT zeroblob(4000) FROM n"
        );
        Ok(c.execute(&sql, [])?)
    };
    let on = store.write_one(Admission::Wait, Access::Write, move |c| {
        big(c).map(|_| thread::current().name().map(str::to_owned))
    });
    let caller = thread::current().name().map(str::to_owned);
    assert_eq!(
        on.await.unwrap(),
        caller,
        "a short WAL: on the caller's thread"
    );
    let attempts = Attempts::default();
    // The checkpointer thread may be copying the frames meanwhile: the store thread's
    // checkpoint is then skipped as busy, until one caught up.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        insert(&store, &attempts).await;
        if attempts.lock().unwrap().last().unwrap().0 == caller {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ran: Vec<_> = attempts
        .lock()
        .unwrap()
        .iter()
        .map(|a| a.0.clone())
        .collect();
    let store_thread = Some("idemgate-sqlite".to_owned());
    assert_eq!(ran[0], store_thread, "a long WAL: on the store thread");
    assert_eq!(ran.last(), Some(&caller), "the WAL restarted: {ran:?}");
    store.close().await;
}

/// A write that begins while another is in progress goes to the queue at once, so
/// concurrent writes share the store thread's transactions.
#[tokio::test]
async fn a_write_beside_another_goes_to_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, Synchronous::Normal);
    let holder = hold_write_lock(&dir);
    let (first, second) = (Attempts::default(), Attempts::default());
    let (a, b) = tokio::join!(insert(&store, &first), insert(&store, &second));
    assert_eq!((a, b), (1, 1));
    holder.join().unwrap();
    let store_thread = Some("idemgate-sqlite".to_owned());
    assert_eq!(first.lock().unwrap().len(), 2, "tried here, then queued");
    assert_eq!(*second.lock().unwrap(), [(store_thread, true)]);
    store.close().await;
    assert_eq!(rows(&dir), 2);
}

/// A database file moved away while a write commits: the write is in the file, which may
/// come back, so its outcome is unknown (`Unavailable`), never "refused, nothing written";
/// on the caller's thread and on the store thread alike.
#[tokio::test]
async fn a_file_moved_while_a_write_commits_leaves_its_outcome_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, Synchronous::Normal);
    let (db, away) = (dir.path().join("w.db"), dir.path().join("away.db"));
    let op = {
        let (db, away) = (db.clone(), away.clone());
        move |c: &Connection| {
            let n = c.execute("INSERT INTO t VALUES (1)", [])?;
            std::fs::rename(&db, &away).unwrap();
            Ok(n)
        }
    };
    let check = |what: &str, result: Result<usize, idemgate_core::StoreError>| {
        let err = result.unwrap_err();
        assert!(err.outcome_unknown(), "{what}: {err:?}");
        assert!(
            matches!(err, idemgate_core::StoreError::Unavailable(_)),
            "{what}: {err:?}"
        );
        std::fs::rename(&away, &db).unwrap();
    };
    let inline = store.write_one(Admission::Wait, Access::Write, op.clone());
    check("inline", inline.await);
    check(
        "queued",
        store.write(Admission::Wait, Access::Write, op).await,
    );
    store.close().await;
    assert_eq!(rows(&dir), 2, "both writes are in the file that came back");
}
