//! The probe against APIs that break the contract: the demo payments API alone (no
//! idempotency at all) and a deliberately broken implementation (it replays by key alone:
//! another principal's answer, and the first answer for another body). Each broken rule
//! must fail its scenario, name the rule, and show the ids that prove a second run. The
//! probe against idemgate's gateway on every store is in the gateway's integration tests.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use idemgate_probe::Status;

mod common;
use common::{args, failed, probe};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_api_alone_runs_every_retry_again() {
    let (base, ledger) = idemgate_demo::payments::spawn().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let report = probe(&args(&dir, &format!("{base}/payments"), &[])).await;
    assert!(!report.passed);
    let detail = failed(&report, "replay-same-request");
    assert!(detail.contains("ran twice: one key, ids pay_"), "{detail}");
    // The abandoned request's answer, still written, shows its run.
    let detail = failed(&report, "disconnect-then-retry");
    let shown = "ran twice: the abandoned request ran (id pay_";
    assert!(detail.starts_with(shown), "{detail}");
    let detail = failed(&report, "concurrent-duplicates");
    assert!(
        detail.starts_with("ran 20 times: one key, ids pay_"),
        "{detail}"
    );
    // Credentials are never printed, in the table or the JSON.
    assert!(
        !report.table().contains("Bearer alice"),
        "{}",
        report.table()
    );
    assert!(!serde_json::to_string(&report)
        .unwrap()
        .contains("Bearer alice"));
    // The report counts what it sent; the API charged at least once per keyed request.
    assert!(report.requests <= 200 && ledger.count() >= report.requests - 10);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["passed"], false);
    let first = &json["scenarios"][0];
    assert_eq!(first["name"], "first-request");
    assert_eq!(first["status"], "passed");
    assert!(first["rule"].as_str().unwrap().contains("another id"));
}

/// A broken implementation: answers by key alone, whoever asks and whatever the body.
async fn broken() -> String {
    let seen: Arc<Mutex<HashMap<Vec<u8>, String>>> = Arc::default();
    let app = Router::new().route(
        "/payments",
        post(move |headers: HeaderMap| async move {
            let key = headers
                .get("idempotency-key")
                .map(|k| k.as_bytes().to_vec());
            let mut seen = seen.lock().unwrap();
            let n = seen.len() + 1;
            let id = match key {
                Some(key) => seen
                    .entry(key)
                    .or_insert_with(|| format!("pay_{n}"))
                    .clone(),
                None => return StatusCode::BAD_REQUEST.into_response(),
            };
            created(&id)
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

fn created(id: &str) -> Response {
    let body = format!(r#"{{"id":"{id}"}}"#);
    let headers = [
        ("content-type", "application/json"),
        ("location", "/payments/x"),
    ];
    (StatusCode::CREATED, headers, body).into_response()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_implementation_fails_the_rules_it_breaks() {
    let base = broken().await;
    let dir = tempfile::tempdir().unwrap();
    let second = ["--second-principal-header", "Authorization: Bearer bob"];
    let report = probe(&args(&dir, &format!("{base}/payments"), &second)).await;
    assert!(!report.passed);
    let detail = failed(&report, "second-principal");
    assert!(
        detail.starts_with("two principals sent one key at once; both got one answer (id \"pay_"),
        "{detail}"
    );
    let detail = failed(&report, "fingerprint-mismatch");
    assert!(
        detail.starts_with(
            "another body under the key (member \"amount\" changed) got the first answer back"
        ),
        "{detail}"
    );
    // Another spelling of a body that is never compared proves nothing: not passed.
    let order = report.scenario("json-member-order").unwrap();
    assert_eq!(order.status, Status::Skipped, "{}", order.detail);
    assert!(order
        .detail
        .starts_with("fingerprint-mismatch did not pass"));
    // What it keeps: one execution per key.
    for name in [
        "replay-same-request",
        "concurrent-duplicates",
        "disconnect-then-retry",
    ] {
        let s = report.scenario(name).unwrap();
        assert!(!s.detail.contains("ran twice"), "{name}: {}", s.detail);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_and_the_profile_bound_what_runs() {
    let (base, ledger) = idemgate_demo::payments::spawn().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let small = ["--max-requests", "12", "--profile", "ietf"];
    let report = probe(&args(&dir, &format!("{base}/payments"), &small)).await;
    assert!(
        report.requests <= 12 && ledger.count() <= 12,
        "{}",
        report.requests
    );
    // A required scenario the budget does not cover leaves the run incomplete (exit 2).
    let why = report.incomplete.as_deref().unwrap_or("");
    assert!(why.starts_with("--max-requests 12 does not cover"), "{why}");
    let skipped = report.scenario("concurrent-duplicates").unwrap();
    assert_eq!(skipped.status, Status::Skipped);
    assert!(
        skipped.detail.contains("past --max-requests"),
        "{}",
        skipped.detail
    );
    let not_a_rule = report.scenario("key-too-short").unwrap();
    assert_eq!(
        (not_a_rule.status, not_a_rule.required),
        (Status::Skipped, false)
    );
    assert!(not_a_rule.detail.contains("not a rule of draft-07"));
    // Without the options they need, scenarios are skipped, not passed.
    let no_second = report.scenario("second-principal").unwrap();
    assert_eq!(no_second.status, Status::Skipped, "{}", no_second.detail);
}

#[test]
fn bad_options_name_the_option() {
    let dir = tempfile::tempdir().unwrap();
    let headers = dir.path().join("headers");
    std::fs::write(
        &headers,
        "# ok\nX-Ok: 1\n\u{feff}Authorization: Bearer secret\n",
    )
    .unwrap();
    let header_file = headers.to_str().unwrap();
    let cases: [(&[&str], &str); 11] = [
        (
            &["-H", "Authorization Bearer x"],
            "--header: a field without `:`",
        ),
        (
            &["--id-pointer", "id"],
            "--id-pointer id: a JSON Pointer starts with /",
        ),
        (
            &["--id-pointer", "/a~2b"],
            "--id-pointer /a~2b: ~ is written only",
        ),
        (
            &["--second-url", "http://other:1/x"],
            "--second-url http://other:1/x: must be on",
        ),
        (
            &["-H", "Idempotency-Key: k"],
            "--header: idempotency-key is not accepted",
        ),
        (&["-H", "Host: a"], "--header: host is not accepted"),
        (
            &["-H", "Content-Length: 5"],
            "--header: content-length is not accepted",
        ),
        (
            &["--header-file", header_file],
            "--header-file", // line 3: the BOM makes the name invalid
        ),
        (
            &["--header-file", "/dev/zero"],
            "--header-file /dev/zero: over 1048576 bytes",
        ),
        (
            &["--concurrency", "200"],
            "--concurrency 200: the scenario needs 201 requests",
        ),
        (
            &["--failing-body-file", "/dev/zero"],
            "--failing-body-file /dev/zero: over 16777216 bytes",
        ),
    ];
    for (extra, message) in cases {
        let e = args(&dir, "http://127.0.0.1:9/payments", extra)
            .resolve()
            .unwrap_err();
        assert!(format!("{e:#}").starts_with(message), "{extra:?}: {e:#}");
        for secret in ["Bearer", "secret"] {
            assert!(
                !format!("{e:#}").contains(secret),
                "a value is never echoed: {e:#}"
            );
        }
    }
    let e = args(&dir, "http://user:hunter2@127.0.0.1:9/payments", &[])
        .resolve()
        .unwrap_err();
    assert!(
        format!("{e:#}").starts_with("URL: user information"),
        "{e:#}"
    );
    assert!(!format!("{e:#}").contains("hunter2"), "{e:#}");
}

#[test]
fn docs_list_every_scenario() {
    let doc = format!("{}/../../docs/probe.md", env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(doc).unwrap();
    for s in idemgate_probe::scenarios::all() {
        let ietf = match s.ietf {
            idemgate_probe::scenarios::Ietf::Required => "required",
            idemgate_probe::scenarios::Ietf::Advisory => "advisory",
            idemgate_probe::scenarios::Ietf::NotARule => "skipped",
        };
        let row = doc
            .lines()
            .find(|l| l.starts_with(&format!("| `{}` |", s.name)));
        let row = row.unwrap_or_else(|| panic!("docs/probe.md has no row for {}", s.name));
        assert!(row.ends_with(&format!("| {ietf} |")), "{}: {row}", s.name);
    }
}

/// A hostile API: ids and bodies with terminal escape sequences, and an answer of 5 MiB.
async fn hostile() -> String {
    let n = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let app = Router::new().route(
        "/payments",
        post(move |headers: HeaderMap| async move {
            let n = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // Past the baseline's two first requests, every third answer is 5 MiB.
            if headers.contains_key("authorization") && n % 3 == 2 {
                return (StatusCode::CREATED, vec![b'x'; 5 << 20]).into_response();
            }
            let body = format!(
                "{{\"id\":\"\\u001b[2J{n}\u{202e}\",\"note\":\"\\u001b]0;owned\\u0007\u{2028}\"}}"
            );
            (
                StatusCode::CREATED,
                [("content-type", "application/json")],
                body,
            )
                .into_response()
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_api_never_reaches_the_terminal_nor_fills_memory() {
    let base = hostile().await;
    let dir = tempfile::tempdir().unwrap();
    let report = probe(&args(&dir, &format!("{base}/payments"), &[])).await;
    assert!(!report.passed);
    let table = report.table();
    assert!(
        !table.contains(['\u{1b}', '\u{7}', '\u{202e}', '\u{2028}']),
        "{table}"
    );
    assert!(table.contains("\\u{1b}[2J"), "{table}");
    assert!(table.contains("length limit exceeded"), "{table}");
}
