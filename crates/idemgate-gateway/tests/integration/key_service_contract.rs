//! The gateway on `store = "idemgate://..."`: the contract tests (`contract.rs`) run again
//! with every gateway's records in a key service (in process, the real router, listener and
//! client) on SQLite and on PostgreSQL. `sqlite` and `postgres` stand in for the
//! support module: their `gateway` and `memory_gateway` put a key service behind the
//! gateway where the contract tests ask for `memory://`.

use std::time::Duration;

use idemgate_gateway::config::Config;
use tokio::sync::oneshot;

use crate::support::key_service::{config_text, TOKEN_A};
use crate::support::{rand_u64, Gateway};

/// Where the key service keeps its records.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
}

/// Keeps a key service running (and its files and table) as long as its gateway.
struct KeyServiceGuard {
    stop: Option<oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
    table: Option<(String, String)>,
}

impl Drop for KeyServiceGuard {
    fn drop(&mut self) {
        let _ = self.stop.take().map(|s| s.send(()));
        if let Some((url, table)) = self.table.take() {
            // Its own runtime: drop runs outside of any.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Runtime::new().unwrap();
                rt.block_on(async {
                    if let Ok(store) = idemgate_postgres::PostgresStore::connect(&url).await {
                        let q = format!(
                            "DROP TABLE IF EXISTS {table}, {table}_migrations, {table}_failovers"
                        );
                        let _ = sqlx::query(&q).execute(store.pool()).await;
                    }
                });
            })
            .join();
        }
    }
}

/// Starts a key service on `backend` and returns its `idemgate://` URL and guard.
async fn start(backend: Backend) -> (String, KeyServiceGuard) {
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let pg = match backend {
        Backend::Postgres => std::env::var("IDEMGATE_TEST_DATABASE_URL").ok(),
        Backend::Sqlite => None,
    };
    if matches!(backend, Backend::Postgres) && pg.is_none() {
        eprintln!("IDEMGATE_TEST_DATABASE_URL is unset: this key service runs on SQLite instead");
    }
    let table = pg.map(|url| (url, format!("idem_ks_{:012x}", rand_u64() >> 16)));
    let (store, extra) = match &table {
        Some((url, t)) => (url.clone(), format!("store_table = \"{t}\"")),
        None => (
            format!("sqlite://{}", dir.path().join("ks.db").display()),
            String::new(),
        ),
    };
    let text = config_text(&store, &addr, &format!("{extra}\npurge_interval = \"0s\""));
    let config = Config::from_toml(&text).unwrap();
    let config = idemgate_gateway::key_service::resolve(config, &mut Vec::new()).unwrap();
    let store = idemgate_gateway::store::open(&config.base.store, &config.base.store_options)
        .await
        .unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(idemgate_gateway::key_service::run(
        config,
        std::sync::Arc::new(store),
        listener,
        None,
        async {
            let _ = rx.await;
        },
    ));
    let guard = KeyServiceGuard {
        stop: Some(tx),
        _dir: dir,
        table,
    };
    (format!("idemgate://{addr}"), guard)
}

/// `support::gateway`, with a key service on `backend` where it asks for `memory://`.
pub(crate) async fn gateway(
    backend: Backend,
    upstream: &str,
    store: &str,
    edit: impl FnOnce(&mut Config),
) -> Gateway {
    if store != "memory://" {
        return crate::support::gateway(upstream, store, edit).await;
    }
    let (url, guard) = start(backend).await;
    let token = guard._dir.path().join("token");
    std::fs::write(&token, format!("{TOKEN_A}\n")).unwrap();
    let mut gw = crate::support::gateway(upstream, &url, |c| {
        c.store_token_file = token.display().to_string();
        edit(c)
    })
    .await;
    gw.keep(Box::new(guard));
    tokio::time::sleep(Duration::from_millis(10)).await;
    gw
}

macro_rules! backend_support {
    ($name:ident, $backend:expr) => {
        /// The support module, with gateways on a key service.
        pub(crate) mod $name {
            pub(crate) use crate::support::*;

            pub(crate) async fn gateway(
                upstream: &str,
                store: &str,
                edit: impl FnOnce(&mut idemgate_gateway::config::Config),
            ) -> Gateway {
                super::gateway($backend, upstream, store, edit).await
            }

            pub(crate) async fn memory_gateway(upstream: &Upstream) -> Gateway {
                gateway(&upstream.base, "memory://", |_| {}).await
            }
        }
    };
}

backend_support!(sqlite, super::Backend::Sqlite);
backend_support!(postgres, super::Backend::Postgres);
