//! The same address serving another server (a relay the store connects through): another
//! database is refused, naming the system identifier; the promoted standby of the same
//! cluster is accepted as a failover.

use std::str::FromStr;
use std::time::Duration;

use idemgate_core::{IdempotencyStore, StoreError};
use idemgate_postgres::PostgresStoreError;
use sqlx::postgres::PgConnectOptions;

use crate::cluster::Cluster;
use crate::relay::Relay;
use crate::{completed, eventually, failovers, replicated, store, write_keys};

/// The port of the local test server (`IDEMGATE_TEST_DATABASE_URL`), if it is set.
fn test_server_port() -> Option<u16> {
    let url = std::env::var("IDEMGATE_TEST_DATABASE_URL").ok()?;
    Some(PgConnectOptions::from_str(&url).ok()?.get_port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_database_behind_the_same_address_is_refused() {
    let Some(a) = Cluster::start("async") else {
        return;
    };
    // Another database: the local test server, or a second cluster.
    let second = test_server_port()
        .is_none()
        .then(|| Cluster::start("async"))
        .flatten();
    let other = test_server_port()
        .or(second.as_ref().map(|b| b.primary))
        .unwrap();
    let relay = Relay::start(a.primary).await;
    let store = store(&format!(
        "postgres://postgres@127.0.0.1:{}/postgres",
        relay.port
    ))
    .await;
    let keys = write_keys(&store, 3).await;
    replicated(a.standby, &store.table_name(), 3).await;
    let id = store.system_identifier().expect("readable");
    let before = failovers();

    relay.point_to(other);
    let refusal = eventually(Duration::from_secs(15), "a refusal", || async {
        let err = store
            .get(&keys[0])
            .await
            .expect_err("another database never answers");
        assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
        store.last_refusal()
    })
    .await;
    let text = refusal.to_string();
    assert!(
        matches!(*refusal, PostgresStoreError::OtherDatabase { expected, .. } if expected == id),
        "{refusal:?}"
    );
    assert!(
        text.contains("system identifier") && text.contains(&id.to_string()),
        "{text}"
    );
    assert_eq!(store.timeline(), Some(1));

    a.kill_primary().await;
    a.promote().await;
    relay.point_to(a.standby);
    eventually(
        Duration::from_secs(20),
        "the promoted standby is accepted",
        || async { store.get(&keys[0]).await.ok().flatten() },
    )
    .await;
    for key in &keys {
        completed(&store, key).await;
    }
    assert_eq!(store.timeline(), Some(2));
    assert_eq!(store.system_identifier(), Some(id));
    assert!(failovers() > before, "the failover was counted");
    assert!(store.last_refusal().is_none());
}
