//! The process dies between the payment insert and the commit; the retry with the same key
//! takes over after the lease and gets the real answer, with exactly one payment row.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct Service {
    child: Child,
    base: String,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(url: &str, port: u16, payments: &str, idem: &str) -> Service {
    let child = Command::new(env!("CARGO_BIN_EXE_axum-postgres-transaction"))
        .env("DATABASE_URL", url)
        .env("LISTEN", format!("127.0.0.1:{port}"))
        .env("PAYMENTS_TABLE", payments)
        .env("IDEMPOTENCY_TABLE", idem)
        .env("LEASE_TTL_MS", "1000")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let service = Service {
        child,
        base: format!("http://127.0.0.1:{port}"),
    };
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return service;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the example did not start");
}

fn pay(base: &str, key: &str, pause_ms: Option<u64>) -> reqwest::RequestBuilder {
    let mut rb = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(format!("{base}/payments"))
        .header("authorization", "Bearer alice")
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(r#"{"amount": 1000}"#);
    if let Some(ms) = pause_ms {
        rb = rb.header("x-pause-before-commit-ms", ms.to_string());
    }
    rb
}

async fn count(url: &str, table: &str) -> i64 {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    let (n,): (i64,) = sqlx::query_as(&format!("SELECT count(*) FROM {table}"))
        .fetch_one(&pool)
        .await
        .unwrap();
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_commit_leaves_one_payment_and_the_retry_gets_the_real_answer() {
    let Ok(url) = std::env::var("IDEMGATE_TEST_DATABASE_URL") else {
        println!("skipping: IDEMGATE_TEST_DATABASE_URL is not set");
        return;
    };
    let tag = format!("{:010x}", rand::random::<u64>() >> 24);
    let (payments, idem) = (format!("pay_{tag}"), format!("idem_{tag}"));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let key = format!("crash-{tag}");

    let mut service = start(&url, port, &payments, &idem);
    let base = service.base.clone();
    let k = key.clone();
    let first = tokio::spawn(async move { pay(&base, &k, Some(10_000)).send().await });
    tokio::time::sleep(Duration::from_millis(700)).await; // inserted, not committed
    service.child.kill().unwrap(); // SIGKILL: the transaction never commits
    service.child.wait().unwrap();
    assert!(
        first.await.unwrap().is_err(),
        "the first client lost its connection"
    );
    assert_eq!(
        count(&url, &payments).await,
        0,
        "the uncommitted payment rolled back"
    );

    let service = start(&url, port, &payments, &idem);
    let mut statuses = Vec::new();
    let mut answer = None;
    for _ in 0..40 {
        let resp = pay(&service.base, &key, None).send().await.unwrap();
        statuses.push(resp.status().as_u16());
        if resp.status() == 201 {
            answer = Some(resp.json::<serde_json::Value>().await.unwrap());
            break;
        }
        assert_eq!(
            resp.status(),
            409,
            "in progress until the dead holder's lease lapses"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let answer = answer.unwrap_or_else(|| panic!("no 201 after {statuses:?}"));
    assert_eq!(answer["amount"], 1000);
    assert_eq!(count(&url, &payments).await, 1, "exactly one payment");

    let replay = pay(&service.base, &key, None).send().await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.json::<serde_json::Value>().await.unwrap(), answer);
    assert_eq!(count(&url, &payments).await, 1);

    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    for t in [
        payments,
        idem.clone(),
        format!("{idem}_migrations"),
        format!("{idem}_failovers"),
    ] {
        let _ = sqlx::query(&format!("DROP TABLE IF EXISTS {t}"))
            .execute(&pool)
            .await;
    }
}

/// A handler error after the one-call completion rolls both back; the key then behaves as
/// documented (`409` until the lease lapses, then one takeover), and the stored response
/// went through the layer's header filter (its `Set-Cookie` is never replayed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_after_completing_leaves_the_key_to_lapse_and_run_once() {
    let Ok(url) = std::env::var("IDEMGATE_TEST_DATABASE_URL") else {
        println!("skipping: IDEMGATE_TEST_DATABASE_URL is not set");
        return;
    };
    let tag = format!("{:010x}", rand::random::<u64>() >> 24);
    let (payments, idem) = (format!("pay_{tag}"), format!("idem_{tag}"));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let key = format!("rollback-{tag}");
    let service = start(&url, port, &payments, &idem);
    let failed = pay(&service.base, &key, None)
        .header("x-fail-before-commit", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(failed.status(), 500);
    assert_eq!(count(&url, &payments).await, 0, "the payment rolled back");
    let conflict = pay(&service.base, &key, None).send().await.unwrap();
    assert_eq!(conflict.status(), 409, "in progress under the lease");

    let mut first = None;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let resp = pay(&service.base, &key, None).send().await.unwrap();
        if resp.status() == 201 {
            first = Some(resp);
            break;
        }
        assert_eq!(resp.status(), 409);
    }
    let first = first.expect("a takeover after the lease lapsed");
    assert!(
        first.headers().get("set-cookie").is_some(),
        "the first client gets it"
    );
    assert!(first.headers().get("idempotent-replayed").is_none());
    let answer: serde_json::Value = first.json().await.unwrap();
    assert_eq!(count(&url, &payments).await, 1, "exactly one payment");

    let replay = pay(&service.base, &key, None).send().await.unwrap();
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert!(
        replay.headers().get("set-cookie").is_none(),
        "never replayed"
    );
    assert!(replay.headers().get("location").is_some());
    assert_eq!(replay.json::<serde_json::Value>().await.unwrap(), answer);
    assert_eq!(count(&url, &payments).await, 1);

    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    for t in [
        payments,
        idem.clone(),
        format!("{idem}_migrations"),
        format!("{idem}_failovers"),
    ] {
        let _ = sqlx::query(&format!("DROP TABLE IF EXISTS {t}"))
            .execute(&pool)
            .await;
    }
}
