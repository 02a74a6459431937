//! The start-up check of the server's settings.

use idemgate_core::IdempotencyStore;
use idemgate_redis::ServerWarning;

use crate::common;

#[tokio::test]
async fn check_server_reports_the_settings_that_can_lose_records() {
    let Some(store) = common::fresh_store().await else {
        return;
    };
    let mut raw = common::raw(&common::url().unwrap()).await;
    let warnings = store.check_server().await.unwrap();
    for w in &warnings {
        println!("warning: {w}");
    }
    let config = |name: &'static str| {
        let mut raw = raw.clone();
        async move {
            let pair: Vec<String> = redis::cmd("CONFIG")
                .arg("GET")
                .arg(name)
                .query_async(&mut raw)
                .await
                .unwrap();
            pair[1].clone()
        }
    };
    let policy = config("maxmemory-policy").await;
    let aof = config("appendonly").await;
    assert_eq!(
        warnings
            .iter()
            .any(|w| matches!(w, ServerWarning::Eviction { policy: p, .. } if *p == policy)),
        policy != "noeviction"
    );
    assert_eq!(
        warnings
            .iter()
            .any(|w| matches!(w, ServerWarning::NoAppendOnlyFile { .. })),
        aof == "no"
    );
    let _: () = redis::cmd("PING").query_async(&mut raw).await.unwrap();
    assert_eq!(store.backend(), "redis");
    store.ping().await.unwrap();
}
