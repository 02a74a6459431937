//! The `idemgate` binary's side of `idemgate demo`: an in-process gateway for each incident
//! of [`idemgate_demo`]. Compiled into the binary only (`main.rs` declares it), never into
//! the `idemgate_gateway` library; the integration test of the demo compiles it too.

use std::sync::Arc;
use std::time::Duration;

use idemgate_demo::{Spawned, Stop};
use idemgate_gateway::config::Config;
use idemgate_gateway::store::AnyStore;

/// Starts a gateway in front of `upstream` on `store` on a free loopback port, with the
/// default policy and no admin listener, until `shutdown` completes.
///
/// # Errors
/// When the configuration is invalid, the store cannot be opened or no port can be bound.
pub(crate) async fn spawn_gateway(upstream: &str, store: &str, shutdown: Stop) -> Spawned {
    let config = idemgate_gateway::cli::validated(Config {
        upstream: upstream.to_owned(),
        store: store.to_owned(),
        admin_listen: String::new(),
        ..Config::default()
    })?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let section = &config.base;
    let store =
        Arc::new(idemgate_gateway::store::open(&section.store, &section.store_options).await?);
    let running = tokio::spawn(async move {
        let served = idemgate_gateway::server::run_with_store(
            config,
            store.clone(),
            listener,
            None,
            shutdown,
        )
        .await;
        close(store).await;
        served
    });
    Ok((base, running))
}

/// Closes a SQLite store once the gateway's background tasks let go of it (they stop with
/// the gateway), so its threads never meet the temporary file deleted after it.
async fn close(mut store: Arc<AnyStore>) {
    for _ in 0..100 {
        match Arc::try_unwrap(store) {
            Ok(AnyStore::Sqlite(s)) => return s.close().await,
            Ok(_) => return,
            Err(shared) => store = shared,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
