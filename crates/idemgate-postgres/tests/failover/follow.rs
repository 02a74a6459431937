//! A failover followed without a configuration change: the primary is killed, the standby
//! promoted, and the same store object writes and reads there.

use std::time::Duration;

use idemgate_core::{IdempotencyStore, StoreError};
use tokio::time::Instant;

use crate::cluster::Cluster;
use crate::{completed, eventually, failovers, replicated, server_ports, store, write_keys};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_is_followed_without_a_config_change() {
    let Some(c) = Cluster::start("async") else {
        return;
    };
    let store = store(&c.url(&[c.primary, c.standby])).await;
    let keys = write_keys(&store, 5).await;
    replicated(c.standby, &store.table_name(), 5).await;
    assert_eq!(store.timeline(), Some(1));
    let before = failovers();

    c.kill_primary().await;
    let err = store.get(&keys[0]).await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    c.promote().await;
    let promoted = Instant::now();
    eventually(Duration::from_secs(20), "the store follows", || async {
        store.get(&keys[0]).await.ok().flatten()
    })
    .await;
    println!("calls succeed {:?} after the promotion", promoted.elapsed());

    for key in &keys {
        completed(&store, key).await;
    }
    for key in write_keys(&store, 2).await {
        completed(&store, &key).await;
    }
    let ports = server_ports(&store, 3).await;
    assert!(
        ports.iter().all(|&p| p == i32::from(c.standby)),
        "{ports:?}"
    );
    assert_eq!(store.timeline(), Some(2));
    assert!(failovers() > before, "the failover was counted");
    assert!(store.last_refusal().is_none());
}
