//! The gateway on the PostgreSQL store (this machine's server, `IDEMGATE_TEST_DATABASE_URL`).
//! Each test uses its own table, so runs never collide.

use crate::support::*;

/// The server's URL, or `None` (printing why) when the variable is unset.
fn database_url() -> Option<String> {
    test_url("IDEMGATE_TEST_DATABASE_URL")
}

fn table() -> String {
    format!("idem_gw_{:012x}", rand_u64() >> 16)
}

async fn drop_table(url: &str, table: &str) {
    if let Ok(store) = idemgate_postgres::PostgresStore::connect(url).await {
        let sql = format!("DROP TABLE IF EXISTS {table}, {table}_migrations, {table}_failovers");
        let _ = sqlx::query(&sql).execute(store.pool()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_duplicates_run_once() {
    let Some(url) = database_url() else { return };
    let up = upstream().await;
    let t = table();
    let gw = gateway(&up.base, &url, |c| c.store_table = t.clone()).await;
    let k = key();
    let tasks: Vec<_> = (0..200)
        .map(|_| tokio::spawn(post(&gw.base, "/payments?delay_ms=300", Some(&k), "{}").send()))
        .collect();
    let mut created = 0;
    for task in tasks {
        let resp = task.await.unwrap().unwrap();
        let status = resp.status().as_u16();
        assert!(status == 201 || status == 409, "unexpected {status}");
        if status == 201 && resp.headers().get("idempotent-replayed").is_none() {
            created += 1;
        }
    }
    assert_eq!(created, 1);
    assert_eq!(up.count(), 1);
    drop_table(&url, &t).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateway_processes_share_one_database() {
    let Some(url) = database_url() else { return };
    let up = upstream().await;
    let t = table();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("pg.toml");
    std::fs::write(
        &config,
        format!("store = \"{url}\"\nstore_table = \"{t}\"\n"),
    )
    .unwrap();
    let a = spawn_binary(&up.base, &config).await;
    let b = spawn_binary(&up.base, &config).await;
    let k = key();
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let base = if i % 2 == 0 {
                a.base.clone()
            } else {
                b.base.clone()
            };
            let k = k.clone();
            tokio::spawn(async move {
                post(&base, "/payments?delay_ms=300", Some(&k), "{}")
                    .send()
                    .await
            })
        })
        .collect();
    for task in tasks {
        let status = task.await.unwrap().unwrap().status().as_u16();
        assert!(status == 201 || status == 409, "unexpected {status}");
    }
    assert_eq!(up.count(), 1, "one execution across both gateways");
    for base in [&a.base, &b.base] {
        let replay = post(base, "/payments?delay_ms=300", Some(&k), "{}")
            .send()
            .await
            .unwrap();
        assert_eq!(replay.headers()["idempotent-replayed"], "true");
    }
    drop_table(&url, &t).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_down_is_503_and_recovers_without_a_restart() {
    let Some(url) = database_url() else { return };
    let parsed = url::Url::parse(&url).unwrap();
    let target = format!(
        "{}:{}",
        parsed.host_str().unwrap(),
        parsed.port().unwrap_or(5432)
    );
    let relay = Relay::start(&target).await;
    let relayed = relay.url_for(&url);
    let up = upstream().await;
    let t = table();
    let gw = gateway(&up.base, &relayed, |c| {
        c.store_table = t.clone();
        c.defaults.set("lease_ttl", "1s");
    })
    .await;
    assert_eq!(
        post(&gw.base, "/payments", Some(&key()), "{}")
            .send()
            .await
            .unwrap()
            .status(),
        201
    );

    relay.stop();
    for _ in 0..3 {
        let resp = post(&gw.base, "/payments", Some(&key()), "{}")
            .send()
            .await
            .unwrap();
        assert_problem(resp, 503, "store-unavailable").await;
    }
    assert_eq!(
        up.count(),
        1,
        "nothing forwarded while the database is down"
    );

    relay.start_again();
    let status = status_once_recovered(&gw.base).await;
    assert_eq!(status, 201, "traffic recovers without a restart");
    assert_eq!(up.count(), 2);
    drop_table(&url, &t).await;
}

/// The connections open on the server under `application_name` `name`.
async fn open_connections(pool: &sqlx::PgPool, name: &str) -> i64 {
    let sql = "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1";
    sqlx::query_scalar(sql)
        .bind(name)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_max_connections_bounds_the_pool() {
    let Some(url) = database_url() else { return };
    let up = upstream().await;
    let t = table();
    let name = format!("idem_pool_{:08x}", rand_u64() >> 32);
    let sep = if url.contains('?') { '&' } else { '?' };
    let named = format!("{url}{sep}application_name={name}");
    let gw = gateway(&up.base, &named, |c| {
        c.store_table = t.clone();
        c.store_max_connections = 3;
    })
    .await;
    let burst: Vec<_> = (0..60)
        .map(|_| tokio::spawn(post(&gw.base, "/payments?delay_ms=50", Some(&key()), "{}").send()))
        .collect();
    let watcher = idemgate_postgres::PostgresStore::connect(&url)
        .await
        .unwrap();
    let mut most = 0;
    while !burst.iter().all(|t| t.is_finished()) {
        most = most.max(open_connections(watcher.pool(), &name).await);
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    for task in burst {
        assert_eq!(task.await.unwrap().unwrap().status(), 201);
    }
    assert_eq!(up.count(), 60);
    assert!(
        (1..=3).contains(&most),
        "{most} connections open, at most 3 allowed"
    );
    drop_table(&url, &t).await;
}
