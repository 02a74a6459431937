//! `synchronous_standby_names` emptied at runtime (as Patroni's non-strict synchronous
//! mode does when the standby fails): commits stop waiting, so new keys are refused while
//! existing records are still returned; restored, new keys are taken again.

use std::time::Duration;

use idemgate_core::gauges::GaugedStore;
use idemgate_core::testing::{existing, fp, inserted, request, response, unique_key};
use idemgate_core::{IdempotencyStore, StoreError};
use sqlx::PgConnection;

use crate::cluster::{sync_options, Cluster, Mode};

const LONG: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(86_400);

/// Sets `synchronous_standby_names` on the primary and waits until sessions see it.
async fn set_names(cluster: &Cluster, names: &str) {
    let sql = format!("ALTER SYSTEM SET synchronous_standby_names = '{names}'");
    cluster.exec(&sql).await;
    cluster.exec("SELECT pg_reload_conf()").await;
    let mut conn: PgConnection = cluster.admin().await;
    for _ in 0..100 {
        let now: String = sqlx::query_scalar("SHOW synchronous_standby_names")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        if now == names {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("synchronous_standby_names did not become {names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn emptied_standby_names_refuse_new_keys_and_keep_replays() {
    let cluster = Cluster::start(Mode::Sync).synchronous().await;
    let store = cluster
        .store(&sync_options(4, Duration::from_secs(2)))
        .await;
    let done = request(&unique_key("alice"), fp(1), LONG, DAY);
    let lease = inserted(store.insert_or_get(&done).await.unwrap());
    store.complete(&lease, &response(8)).await.unwrap();

    set_names(&cluster, "").await;
    let d = store.durability().await.unwrap();
    let reason = d.refusing_new_keys.expect("refusing new keys");
    assert!(reason.contains("synchronous_standby_names"), "{reason}");
    let fresh = request(&unique_key("bob"), fp(2), LONG, DAY);
    let err = store.insert_or_get(&fresh).await.unwrap_err();
    assert!(matches!(err, StoreError::Refused(_)), "{err:?}");
    assert!(!err.outcome_unknown());
    assert!(store.get(&fresh.key).await.unwrap().is_none());
    existing(store.insert_or_get(&done).await.unwrap());

    set_names(&cluster, "FIRST 1 (standby)").await;
    assert_eq!(store.durability().await.unwrap().refusing_new_keys, None);
    inserted(store.insert_or_get(&fresh).await.unwrap());
}
