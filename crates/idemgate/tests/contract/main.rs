//! Every row of the contract (README, "The contract") through the layer in an axum app on
//! the memory and SQLite stores, with handlers that count their side effects: a panicking
//! handler, an erroring handler and a client that disconnects included. No stuck key, no
//! double execution; a client-sent header that looks like a principal has no effect.

mod app;
mod records;
mod rows;

use idemgate::{MemoryStore, SqliteStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_contract_row_holds_on_the_memory_store() {
    let app = app::start(MemoryStore::new()).await;
    rows::all(&app, |store, key| {
        Box::pin(idemgate::core::testing::damage_memory(
            store,
            key,
            idemgate::core::testing::Damage::TruncateBody,
        ))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_contract_row_holds_on_the_sqlite_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("contract.db");
    let store = SqliteStore::open(&path, Default::default()).unwrap();
    let app = app::start(store).await;
    rows::all(&app, |store, key| {
        let key = key.clone();
        Box::pin(async move {
            let changed = store
                .with_writer_connection(move |c| {
                    c.execute(
                        "UPDATE idempotency_records SET response_body = \
                         substr(response_body, 1, length(response_body) - 1) \
                         WHERE principal = ?1 AND route = ?2 AND key = ?3",
                        [&key.principal, &key.route, key.key.as_str()],
                    )
                })
                .await
                .unwrap()
                .unwrap();
            assert_eq!(changed, 1);
        })
    })
    .await;
    records::store_unavailable(&app, &path).await;
    app.layer.drain().await;
}
