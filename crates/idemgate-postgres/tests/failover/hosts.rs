//! Host lists: the primary is found whatever its place; a standby is refused.

use std::time::Duration;

use idemgate_core::IdempotencyStore;
use idemgate_postgres::{PostgresStore, PostgresStoreError};

use crate::cluster::Cluster;
use crate::{completed, dead_port, server_ports, store, write_keys};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_with_the_standby_first_connects_to_the_primary() {
    let Some(c) = Cluster::start("async") else {
        return;
    };
    let store = store(&c.url(&[c.standby, c.primary])).await;
    let ports = server_ports(&store, 4).await;
    assert!(
        ports.iter().all(|&p| p == i32::from(c.primary)),
        "{ports:?}"
    );
    for key in write_keys(&store, 3).await {
        completed(&store, &key).await;
    }
    assert_eq!(store.timeline(), Some(1));
    assert!(store.system_identifier().is_some());
    assert!(store.last_refusal().is_none());

    // `any` keeps the first host that accepts, the standby here: its writes then fail.
    let url = format!(
        "{}?target_session_attrs=any",
        c.url(&[c.standby, c.primary])
    );
    let any = PostgresStore::connect(&url).await.unwrap();
    assert_eq!(server_ports(&any, 1).await, [i32::from(c.standby)]);
    assert_eq!(any.timeline(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_alone_is_refused_naming_recovery() {
    let Some(c) = Cluster::start("async") else {
        return;
    };
    let err = PostgresStore::connect(&c.url(&[c.standby]))
        .await
        .unwrap_err();
    assert!(matches!(err, PostgresStoreError::Standby { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("pg_is_in_recovery") && text.contains("standby"),
        "{text}"
    );
    let explicit = format!("{}?target_session_attrs=read-write", c.url(&[c.standby]));
    let err = PostgresStore::connect(&explicit).await.unwrap_err();
    assert!(matches!(err, PostgresStoreError::Standby { .. }), "{err:?}");

    // A list without a usable host says why for each.
    let dead = dead_port();
    let err = PostgresStore::connect(&c.url(&[c.standby, dead]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, PostgresStoreError::NoServer { .. }),
        "{err:?}"
    );
    let text = err.to_string();
    let standby = format!("127.0.0.1:{}: the server at", c.standby);
    assert!(
        text.contains(&standby) && text.contains("pg_is_in_recovery"),
        "{text}"
    );
    assert!(text.contains(&format!("127.0.0.1:{dead}: ")), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_system_identifier_skips_that_check() {
    let Some(c) = Cluster::start("async") else {
        return;
    };
    let admin = PostgresStore::connect(&c.url(&[c.primary])).await.unwrap();
    sqlx::raw_sql(
        "CREATE ROLE app LOGIN; \
         REVOKE EXECUTE ON FUNCTION pg_control_system() FROM PUBLIC",
    )
    .execute(admin.pool())
    .await
    .unwrap();
    let url = format!("postgres://app@127.0.0.1:{}/postgres", c.primary);
    let store = PostgresStore::connect(&url).await.unwrap();
    assert_eq!(store.system_identifier(), None);
    assert_eq!(store.timeline(), Some(1));
    tokio::time::timeout(Duration::from_secs(5), store.ping())
        .await
        .unwrap()
        .unwrap();
}
