//! `require_synchronous_replication` on a healthy cluster: what connecting refuses, and the
//! store conformance suite with every write confirmed.

use idemgate_core::report::error_text;
use idemgate_core::testing;
use idemgate_postgres::{PostgresOptions, PostgresStore};

use crate::cluster::{Cluster, Mode};

/// Options requiring synchronous replication, failing fast when the pool cannot connect.
fn required() -> PostgresOptions {
    PostgresOptions::new()
        .with_require_synchronous_replication(true)
        .with_acquire_timeout(std::time::Duration::from_millis(500))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_to_an_async_cluster_fails_naming_synchronous_standby_names() {
    let cluster = Cluster::start(Mode::Async);
    let err = PostgresStore::connect_with(&cluster.url(), &required())
        .await
        .expect_err("no synchronous standby is configured");
    let text = error_text(&err);
    assert!(text.contains("synchronous_standby_names"), "{text}");
    // Without the requirement the same cluster is fine.
    PostgresStore::connect(&cluster.url()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_is_confirmed_on_a_sync_cluster() {
    let cluster = Cluster::start(Mode::Sync).synchronous().await;

    // A role that cannot read the standbys' positions, and a URL asking for less than a
    // flush on the standby, are refused when connecting.
    cluster.exec("CREATE ROLE plain LOGIN").await;
    let plain = cluster.url().replace("postgres@", "plain@");
    let err = PostgresStore::connect_with(&plain, &required())
        .await
        .unwrap_err();
    assert!(
        error_text(&err).contains("pg_monitor"),
        "{}",
        error_text(&err)
    );
    let write = format!(
        "{}?options=-c%20synchronous_commit%3Dremote_write",
        cluster.url()
    );
    let err = PostgresStore::connect_with(&write, &required())
        .await
        .unwrap_err();
    assert!(
        error_text(&err).contains("synchronous_commit"),
        "{}",
        error_text(&err)
    );
    let apply = format!(
        "{}?options=-c%20synchronous_commit%3Dremote_apply",
        cluster.url()
    );
    PostgresStore::connect_with(&apply, &required())
        .await
        .unwrap();

    let store = cluster.store(&required()).await;
    macro_rules! cases {
        ($($case:ident),* $(,)?) => {$(
            let table = format!("idem_case_{:08x}", rand::random::<u32>());
            let on_table = store.clone().with_table_name(&table).unwrap();
            on_table.migrate().await.unwrap();
            testing::$case(on_table).await;
        )*};
    }
    cases!(
        fresh_insert,
        concurrent_inserts_have_one_winner,
        complete_then_replay,
        not_replayable_is_kept,
        takeover_and_stale_fence,
        take_over_refuses_a_stale_snapshot,
        late_outcome_after_lapse_lands,
        renewal_keeps_the_snapshot_fresh,
        renewal_outlives_record_ttl,
        concurrent_takeover_has_one_winner,
        fail_then_take_over,
        release_allows_retry,
        scope_isolates_records,
        expired_ttl_counts_as_absent,
        purge_spares_reacquired,
        purge_in_batches,
        peek_agrees_with_insert_or_get,
    );
}
