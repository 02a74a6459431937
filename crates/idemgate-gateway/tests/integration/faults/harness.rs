//! One persistent store per test, with its own namespace, a way to cut it, and raw access
//! to damage its records.

use std::sync::mpsc;
use std::time::Duration;

use idemgate_gateway::config::Config;

use crate::support::{delete_redis_prefix, drop_pg_table, rand_u64, test_url, Relay};

/// The store under test.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
    Redis,
}

/// A damage done to a completed record with raw store commands.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Damage {
    TruncateBody,
    InvalidStatus,
    DropHeaders,
    /// A state no build writes (Redis; the SQL stores' CHECK constraints refuse it).
    BogusState,
}

/// A store with its own table, key prefix or file.
pub(crate) struct Store {
    /// The URL the gateway uses (through the relay for PostgreSQL and Redis).
    pub(crate) url: String,
    backend: Backend,
    /// The server's own URL, or the SQLite file's path.
    direct: String,
    relay: Option<Relay>,
    namespace: String,
    _dir: Option<tempfile::TempDir>,
}

/// A running outage; [`Store::outage_end`] ends it.
pub(crate) struct Outage(Option<(mpsc::Sender<()>, std::thread::JoinHandle<()>)>);

impl Store {
    /// A fresh store, or `None` (after printing why) when its server is not configured.
    pub(crate) async fn new(backend: Backend) -> Option<Self> {
        let namespace = format!("idem_faults_{:012x}", rand_u64() >> 16);
        let (direct, dir) = match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("idemgate.db").display().to_string();
                (path, Some(dir))
            }
            Backend::Postgres => (test_url("IDEMGATE_TEST_DATABASE_URL")?, None),
            Backend::Redis => (test_url("IDEMGATE_TEST_REDIS_URL")?, None),
        };
        let (url, relay) = match backend {
            Backend::Sqlite => (format!("sqlite://{direct}"), None),
            _ => {
                let u = url::Url::parse(&direct).unwrap();
                let target = format!(
                    "{}:{}",
                    u.host_str().unwrap(),
                    u.port().unwrap_or(default_port(backend))
                );
                let relay = Relay::start(&target).await;
                (relay.url_for(&direct), Some(relay))
            }
        };
        Some(Self {
            url,
            backend,
            direct,
            relay,
            namespace,
            _dir: dir,
        })
    }

    /// Points the gateway's config at this store's namespace.
    pub(crate) fn configure(&self, c: &mut Config) {
        match self.backend {
            Backend::Postgres => c.store_table = self.namespace.clone(),
            Backend::Redis => c.store_key_prefix = format!("{}:", self.namespace),
            Backend::Sqlite => {}
        }
    }

    /// The gateway config file's lines for this store.
    pub(crate) fn toml(&self) -> String {
        let ns = &self.namespace;
        match self.backend {
            Backend::Postgres => format!("store = \"{}\"\nstore_table = \"{ns}\"\n", self.url),
            Backend::Redis => format!("store = \"{}\"\nstore_key_prefix = \"{ns}:\"\n", self.url),
            Backend::Sqlite => format!("store = \"{}\"\n", self.url),
        }
    }

    /// The relay in front of the server (PostgreSQL and Redis only).
    pub(crate) fn relay(&self) -> &Relay {
        self.relay.as_ref().expect("a server store")
    }

    /// Makes the store unreachable: the relay refuses and cuts connections, or (SQLite)
    /// another connection takes the write lock and holds it.
    pub(crate) async fn outage_start(&self) -> Outage {
        match &self.relay {
            Some(relay) => {
                relay.stop();
                Outage(None)
            }
            None => Outage(Some(hold_write_lock(&self.direct))),
        }
    }

    /// Ends an outage.
    pub(crate) async fn outage_end(&self, outage: Outage) {
        match (&self.relay, outage.0) {
            (Some(relay), _) => relay.start_again(),
            (None, Some((stop, holder))) => {
                let _ = stop.send(());
                tokio::task::spawn_blocking(move || holder.join().unwrap())
                    .await
                    .unwrap();
            }
            (None, None) => {}
        }
    }

    /// Damages the completed record of idempotency key `key` behind the gateway's back.
    pub(crate) async fn damage(&self, key: &str, damage: Damage) {
        match self.backend {
            Backend::Sqlite => {
                let set = match damage {
                    Damage::TruncateBody => "response_body = substr(response_body, 1, 5)",
                    Damage::InvalidStatus => "status = 1000",
                    Damage::DropHeaders => "response_headers = NULL",
                    Damage::BogusState => unreachable!("SQLite's CHECK refuses other states"),
                };
                let conn = rusqlite::Connection::open(&self.direct).unwrap();
                conn.busy_timeout(Duration::from_secs(5)).unwrap();
                let sql = format!("UPDATE idempotency_records SET {set} WHERE key = ?1");
                assert_eq!(conn.execute(&sql, [key]).unwrap(), 1);
            }
            Backend::Postgres => {
                let set = match damage {
                    Damage::TruncateBody => "response = substring(response from 1 for 5)",
                    Damage::InvalidStatus => "status = 1000",
                    Damage::DropHeaders => "response_headers = NULL",
                    Damage::BogusState => unreachable!("the CHECK refuses other states"),
                };
                let pool = sqlx::PgPool::connect(&self.direct).await.unwrap();
                let sql = format!("UPDATE {} SET {set} WHERE key = $1", self.namespace);
                let done = sqlx::query(&sql).bind(key).execute(&pool).await.unwrap();
                assert_eq!(done.rows_affected(), 1);
            }
            Backend::Redis => self.damage_redis(key, damage).await,
        }
    }

    async fn damage_redis(&self, key: &str, damage: Damage) {
        let client = redis::Client::open(self.direct.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}:*", self.namespace))
            .query_async(&mut conn)
            .await
            .unwrap();
        let mut found = 0;
        for k in keys {
            let stored: Option<String> = redis::cmd("HGET")
                .arg(&k)
                .arg("k")
                .query_async(&mut conn)
                .await
                .unwrap();
            if stored.as_deref() != Some(key) {
                continue;
            }
            found += 1;
            let cmd = match damage {
                Damage::TruncateBody => {
                    let body: Vec<u8> = redis::cmd("HGET")
                        .arg(&k)
                        .arg("rb")
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    redis::cmd("HSET")
                        .arg(&k)
                        .arg("rb")
                        .arg(&body[..5.min(body.len())])
                        .clone()
                }
                Damage::InvalidStatus => redis::cmd("HSET").arg(&k).arg("rs").arg(1000).clone(),
                Damage::DropHeaders => redis::cmd("HDEL").arg(&k).arg("rh").clone(),
                Damage::BogusState => redis::cmd("HSET").arg(&k).arg("st").arg("bogus").clone(),
            };
            let _: i64 = cmd.query_async(&mut conn).await.unwrap();
        }
        assert_eq!(found, 1, "one record for the key");
    }

    /// Drops what the test created.
    pub(crate) async fn cleanup(self) {
        match self.backend {
            Backend::Postgres => drop_pg_table(&self.direct, &self.namespace).await,
            Backend::Redis => {
                delete_redis_prefix(&self.direct, &format!("{}:", self.namespace)).await;
            }
            Backend::Sqlite => {}
        }
    }
}

fn default_port(backend: Backend) -> u16 {
    match backend {
        Backend::Postgres => 5432,
        _ => 6379,
    }
}

/// Another connection takes the SQLite write lock (and writes, so it holds it) until told
/// to stop: the store's writes wait out their busy timeout and fail, as when another process
/// holds the file.
fn hold_write_lock(path: &str) -> (mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (stop, stopped) = mpsc::channel::<()>();
    let (locked, is_locked) = mpsc::channel::<()>();
    let path = path.to_owned();
    let holder = std::thread::spawn(move || {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.busy_timeout(Duration::from_secs(10)).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE; CREATE TABLE IF NOT EXISTS lock_holder (x INTEGER); INSERT INTO lock_holder VALUES (1);").unwrap();
        locked.send(()).unwrap();
        let _ = stopped.recv();
        conn.execute_batch("ROLLBACK").unwrap();
    });
    is_locked.recv().unwrap();
    (stop, holder)
}
