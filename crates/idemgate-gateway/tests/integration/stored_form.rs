//! `store_response`: what a route stores of a response. The first client gets the whole
//! response; the store never holds a redacted value (its file, table or keys are read
//! back); retries get the stored form, marked.

use idemgate_gateway::config::{Config, RouteTable};

use crate::support::*;

/// The routes of these tests: `/payments` redacts the upstream's echo of the request
/// (`/received`), `/orders` stores status and headers only.
fn routes(c: &mut Config) {
    c.routes.push(
        RouteTable::route("POST /payments")
            .with("store_response", "redacted")
            .with("redact_json_pointers", vec!["/received"]),
    );
    c.routes
        .push(RouteTable::route("POST /orders").with("store_response", "status-only"));
}

fn marker() -> String {
    format!("MARKER-{:016x}", rand_u64())
}

/// Sends the request twice with one key: the first answer holds `secret`, the retry the
/// stored form. Returns the retry's headers and body.
async fn first_and_retry(
    base: &str,
    path: &str,
    secret: &str,
) -> (reqwest::header::HeaderMap, String) {
    let (k, body) = (key(), format!("{{\"card\":\"{secret}\"}}"));
    let first = post(base, path, Some(&k), &body).send().await.unwrap();
    assert_eq!(first.status(), 201);
    for reserved in ["idempotent-redacted", "idempotent-body-omitted"] {
        assert!(
            first.headers().get(reserved).is_none(),
            "{reserved} on the first answer"
        );
    }
    assert!(
        first.text().await.unwrap().contains(secret),
        "the first client gets it all"
    );
    let retry = post(base, path, Some(&k), &body).send().await.unwrap();
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    (retry.headers().clone(), retry.text().await.unwrap())
}

/// Both routes against `gw`: returns the secrets sent, which the store must not hold.
async fn check_routes(gw: &Gateway, up: &Upstream) -> Vec<String> {
    let secret = marker();
    let (headers, body) = first_and_retry(&gw.base, "/payments", &secret).await;
    assert_eq!(body, "{\"execution\":1,\"received\":\"[redacted]\"}");
    assert_eq!(headers["idempotent-redacted"], "true");
    assert!(
        headers.get("etag").is_none(),
        "an ETag of the original body is not replayed"
    );
    assert_eq!(headers["x-upstream"], "yes");

    let secret2 = marker();
    let (headers, body) = first_and_retry(&gw.base, "/orders", &secret2).await;
    assert_eq!(body, "");
    assert_eq!(headers["idempotent-body-omitted"], "true");
    assert_eq!(headers["location"], "/payments/pay_1");
    assert_eq!(up.count(), 2);
    vec![secret, secret2]
}

/// Whether `bytes` hold `secret`, as it is or hex-encoded (`pg_dump` writes a `bytea` in
/// hex).
fn found(bytes: &[u8], secret: &str) -> bool {
    let hex = hex::encode(secret);
    [secret.as_bytes(), hex.as_bytes()]
        .iter()
        .any(|s| bytes.windows(s.len()).any(|w| w == *s))
}

fn assert_absent(what: &str, bytes: &[u8], secrets: &[String]) {
    for s in secrets {
        assert!(!found(bytes, s), "{what} holds {s}");
    }
}

#[tokio::test]
async fn sqlite_file_and_wal_hold_no_redacted_value() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemgate.db");
    let store = format!("sqlite://{}", path.display());
    let gw = gateway(&up.base, &store, routes).await;
    let secrets = check_routes(&gw, &up).await;
    for file in std::fs::read_dir(dir.path()).unwrap() {
        let file = file.unwrap().path();
        assert_absent(
            &file.display().to_string(),
            &std::fs::read(&file).unwrap(),
            &secrets,
        );
    }
    // The check can fail: a full route stores the value.
    let full = marker();
    let (_, body) = first_and_retry(&gw.base, "/other", &full).await;
    assert!(body.contains(&full));
    let wal = std::fs::read(dir.path().join("idemgate.db-wal")).unwrap_or_default();
    let db = std::fs::read(&path).unwrap();
    assert!([wal, db]
        .iter()
        .any(|b| b.windows(full.len()).any(|w| w == full.as_bytes())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_table_dump_holds_no_redacted_value() {
    let Some(url) = test_url("IDEMGATE_TEST_DATABASE_URL") else {
        return;
    };
    let up = upstream().await;
    let table = format!("idem_form_{:012x}", rand_u64() >> 16);
    let gw = gateway(&up.base, &url, |c| {
        c.store_table = table.clone();
        routes(c);
    })
    .await;
    let secrets = check_routes(&gw, &up).await;
    // The check can fail: a full route stores the value, which the dump shows (in hex).
    let full = marker();
    first_and_retry(&gw.base, "/other", &full).await;
    let dump = std::process::Command::new("pg_dump")
        .args(["--data-only", "--table", &table, &url])
        .output()
        .unwrap();
    drop_pg_table(&url, &table).await;
    assert!(
        dump.status.success(),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    assert!(dump.stdout.len() > 100, "the dump holds the records");
    assert_absent("pg_dump", &dump.stdout, &secrets);
    assert!(
        found(&dump.stdout, &full),
        "the dump shows a full route's value"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_values_hold_no_redacted_value() {
    let Some(url) = test_url("IDEMGATE_TEST_REDIS_URL") else {
        return;
    };
    let up = upstream().await;
    let prefix = format!("idem-form-{:012x}:", rand_u64() >> 16);
    let gw = gateway(&up.base, &url, |c| {
        c.store_key_prefix = prefix.clone();
        routes(c);
    })
    .await;
    let secrets = check_routes(&gw, &up).await;
    let values = redis_values(&url, &prefix).await;
    assert!(values.len() > 100, "the records are read");
    assert_absent("the Redis values", &values, &secrets);
    // The check can fail: a full route stores the value.
    let full = marker();
    first_and_retry(&gw.base, "/other", &full).await;
    let values = redis_values(&url, &prefix).await;
    delete_redis_prefix(&url, &prefix).await;
    assert!(values.windows(full.len()).any(|w| w == full.as_bytes()));
}

#[tokio::test]
async fn an_upstream_cannot_mark_its_own_response_redacted() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let k = key();
    let first = post(&gw.base, "/payments?reserved=1", Some(&k), "{}")
        .header("idempotent-redacted", "true")
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 201);
    for reserved in [
        "idempotent-redacted",
        "idempotent-body-omitted",
        "idempotent-replayed",
    ] {
        assert!(
            first.headers().get(reserved).is_none(),
            "{reserved} from the upstream"
        );
    }
    let seen = up.last_headers();
    assert!(
        seen.get("idempotent-redacted").is_none(),
        "stripped from the request"
    );
    let retry = post(&gw.base, "/payments?reserved=1", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert!(retry.headers().get("idempotent-redacted").is_none());
    assert!(retry.headers().get("idempotent-body-omitted").is_none());
}
