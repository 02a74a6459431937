//! What an operator sees: `/metrics` after scripted traffic (every counter and histogram
//! of a route moves as it should, with HELP text, as histograms with buckets), and the
//! access log of the real binary (hashed key and principal, no body, no credential).

use std::collections::HashMap;
use std::io::Read;
use std::time::Duration;

use idemgate_gateway::config::RouteTable;

use crate::support::*;

/// The route of these tests only: the recorder is shared by every test of this binary.
const ROUTE: &str = "POST /metered/{id}";

/// The value of each sample line of `text` whose name is `name` and whose labels include
/// every `labels` pair, summed.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

#[tokio::test]
async fn metrics_move_with_traffic_and_are_described() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |c| {
        c.routes.push(RouteTable::route(ROUTE))
    })
    .await;
    let (k1, slow, failing) = (key(), key(), key());
    // Fresh, then its replay, then the same key with another body: 201, replay, 422.
    let fresh = post(&gw.base, "/metered/1", Some(&k1), r#"{"a":1}"#);
    assert_eq!(fresh.send().await.unwrap().status(), 201);
    let replay = post(&gw.base, "/metered/1", Some(&k1), r#"{"a":1}"#);
    let replay = replay.send().await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let other = post(&gw.base, "/metered/1", Some(&k1), r#"{"a":2}"#);
    assert_problem(other.send().await.unwrap(), 422, "fingerprint-mismatch").await;
    // A retry while the first attempt runs: 409.
    let first = tokio::spawn(post(&gw.base, "/metered/2?delay_ms=3000", Some(&slow), "{}").send());
    while up.count() < 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let retry = post(&gw.base, "/metered/2?delay_ms=3000", Some(&slow), "{}");
    assert_problem(retry.send().await.unwrap(), 409, "request-in-flight").await;
    assert_eq!(first.await.unwrap().unwrap().status(), 201);
    // The upstream fails: its 500 is delivered and the key failed.
    let failed = post(&gw.base, "/metered/3?status=500", Some(&failing), "{}");
    assert_eq!(failed.send().await.unwrap().status(), 500);
    assert_eq!(up.count(), 3, "only the three acquired requests ran");

    let text = scrape(&gw.admin).await;
    let route = ("route", ROUTE);
    let outcomes = HashMap::from([
        ("acquired", 3.0),
        ("replayed", 1.0),
        ("mismatch", 1.0),
        ("conflict", 1.0),
    ]);
    for (outcome, n) in &outcomes {
        let labels = [route, ("outcome", *outcome)];
        assert_eq!(
            sample(&text, "idempotency_requests_total", &labels),
            *n,
            "{outcome}: {text}"
        );
        let count = "idempotency_request_duration_seconds_count";
        assert_eq!(sample(&text, count, &labels), *n, "{outcome}");
        // A histogram with the configured buckets: everything is under +Inf.
        let le = [route, ("outcome", *outcome), ("le", "+Inf")];
        assert_eq!(
            sample(&text, "idempotency_request_duration_seconds_bucket", &le),
            *n
        );
    }
    let upstream = "idempotency_upstream_duration_seconds_count";
    assert_eq!(sample(&text, upstream, &[route]), 3.0);
    let classes = "idempotency_upstream_responses_total";
    assert_eq!(sample(&text, classes, &[route, ("class", "2xx")]), 2.0);
    assert_eq!(sample(&text, classes, &[route, ("class", "5xx")]), 1.0);
    assert_eq!(sample(&text, classes, &[route, ("class", "4xx")]), 0.0);
    let store = [
        ("backend", "memory"),
        ("op", "insert_or_get"),
        ("le", "0.005"),
    ];
    // The three acquires (a replay, a mismatch and a 409 are read first, without an
    // insert); other tests of this process add theirs.
    assert!(sample(&text, "idempotency_store_duration_seconds_bucket", &store) >= 3.0);
    assert!(
        !text.contains("quantile="),
        "histograms, not summaries: {text}"
    );
    for name in [
        "idempotency_requests_total",
        "idempotency_request_duration_seconds",
        "idempotency_upstream_duration_seconds",
        "idempotency_upstream_responses_total",
        "idempotency_store_duration_seconds",
    ] {
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "no HELP for {name}"
        );
    }
    for line in text.lines().filter(|l| l.starts_with("idempotency_")) {
        assert!(!line.contains(&k1) && !line.contains("alice"), "{line}");
    }
    gw.stop().await;
}

#[tokio::test]
async fn the_access_log_has_hashed_identifiers_and_no_secrets() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.toml");
    std::fs::write(&config, "store = \"memory://\"\n").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["--log-format", "json", "serve", "--listen", &listen])
        .args(["--admin-listen", "", "--upstream", &up.base, "--config"])
        .arg(&config)
        .env("RUST_LOG", "info")
        .env("IDEMGATE_LOG_HASH_KEY", "a secret of 32 bytes, not logged")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut connected = false;
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(&listen).await.is_ok() {
            connected = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(connected, "the gateway did not start");
    let base = format!("http://{listen}");
    let k = key();
    let body = r#"{"card":"4242-4242-4242-4242"}"#;
    let send = |path: &'static str| {
        client()
            .post(format!("{base}{path}"))
            .header("authorization", "Bearer tok_live_credential")
            .header("content-type", "application/json")
            .header("idempotency-key", &k)
            .body(body)
            .send()
    };
    assert_eq!(send("/payments").await.unwrap().status(), 201);
    let replay = send("/payments").await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let other = key();
    let failed = post(&base, "/payments?status=500", Some(&other), "{}");
    assert_eq!(failed.send().await.unwrap().status(), 500);
    // SIGTERM, then read everything it logged.
    let term = std::process::Command::new("kill")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(term.success());
    // Read on another thread: the gateway drains this runtime's connections before exiting.
    let mut pipe = child.stderr.take().unwrap();
    let stderr = tokio::task::spawn_blocking(move || {
        let mut text = String::new();
        pipe.read_to_string(&mut text).unwrap();
        text
    })
    .await
    .unwrap();
    child.wait().unwrap();

    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let access: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["target"] == "idemgate::access")
        .collect();
    assert_eq!(access.len(), 3, "one line per covered request: {stderr}");
    let outcomes: Vec<&str> = access
        .iter()
        .map(|l| l["fields"]["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["acquired", "replayed", "acquired"]);
    let statuses: Vec<u64> = access
        .iter()
        .map(|l| l["fields"]["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, [201, 201, 500]);
    let (first, second) = (&access[0]["fields"], &access[1]["fields"]);
    assert_eq!(first["level"], serde_json::Value::Null);
    assert_eq!(access[0]["level"], "INFO");
    assert_eq!(first["route"], "(unmatched)");
    assert!(first["latency_ms"].as_f64().unwrap() >= 0.0);
    for field in ["key", "principal"] {
        let hash = first[field].as_str().unwrap();
        assert_eq!(hash.len(), 16, "{field}: {hash}");
        assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(
            second[field], first[field],
            "the same {field} hashes the same"
        );
    }
    assert_ne!(access[2]["fields"]["key"], first["key"]);
    // The failed key is logged at warn with the same hashes.
    let warned = lines
        .iter()
        .find(|l| {
            l["level"] == "WARN"
                && l["fields"]["message"]
                    .as_str()
                    .unwrap()
                    .starts_with("key failed")
        })
        .unwrap_or_else(|| panic!("no warn line for the failed key: {stderr}"));
    assert_eq!(warned["fields"]["key"], access[2]["fields"]["key"]);
    assert_eq!(
        warned["fields"]["principal"],
        access[2]["fields"]["principal"]
    );
    for secret in [
        k.as_str(),
        &other,
        "4242",
        "tok_live",
        "alice",
        "a secret of 32",
    ] {
        assert!(
            !stderr.contains(secret),
            "`{secret}` is in the log: {stderr}"
        );
    }
}
