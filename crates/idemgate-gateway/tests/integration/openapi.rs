//! `idemgate openapi`: the fragment and the merge into the example API description validate
//! with openapi-spec-validator, the merge keeps the rest of the description and its format,
//! and schemathesis finds no 5xx of the gateway in front of the example payments API.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use idemgate_demo::payments::Ledger;
use idemgate_gateway::config::Config;
use serde_json::Value;

use crate::support::{data, gateway, output_within, python, run_idemgate, text, Gateway};

fn config() -> String {
    data("openapi/gateway.toml").display().to_string()
}

/// The example payments API behind a gateway configured by `tests/data/openapi/gateway.toml`.
pub(crate) async fn payments_gateway() -> (Gateway, Arc<Ledger>) {
    let (api, ledger) = idemgate_demo::payments::spawn().await.unwrap();
    let file = Config::from_file(&data("openapi/gateway.toml")).unwrap();
    let gw = gateway(&api, "memory://", move |c| {
        *c = Config {
            upstream: c.upstream.clone(),
            store: c.store.clone(),
            listen: c.listen.clone(),
            admin_listen: c.admin_listen.clone(),
            ..file
        };
    })
    .await;
    (gw, ledger)
}

/// Runs `idemgate openapi ARGS`, writing to a file in `dir`; its exit code, stderr and
/// the output's text.
fn openapi(dir: &std::path::Path, name: &str, args: &[&str]) -> (i32, String, String) {
    let out = dir.join(name);
    let mut all = vec!["openapi", "--config"];
    let config = config();
    all.push(&config);
    all.extend_from_slice(args);
    let out_s = out.display().to_string();
    all.extend_from_slice(&["--output", &out_s]);
    let (code, log) = run_idemgate(&all);
    let written = std::fs::read_to_string(&out).unwrap_or_default();
    (code, log, written)
}

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).unwrap()
}

#[test]
fn merge_keeps_format_and_everything_else() {
    let dir = tempfile::tempdir().unwrap();
    let source = data("openapi/payments.yaml");
    let (code, log, merged) = openapi(dir.path(), "m.yaml", &["--merge", source.to_str().unwrap()]);
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains("route `POST /payments/{id}/refunds` matches no operation"),
        "{log}"
    );
    assert!(!log.contains("`POST /payments` matches no"), "{log}");
    assert!(
        merged.starts_with("openapi: 3.0.3\n"),
        "YAML kept: {merged}"
    );
    assert_same_order(&std::fs::read_to_string(&source).unwrap(), &merged);
    let (before, after) = (
        yaml(&std::fs::read_to_string(&source).unwrap()),
        yaml(&merged),
    );
    for unchanged in [
        "/info",
        "/servers",
        "/paths/~1ledger",
        "/paths/~1payments~1{id}",
        "/components/schemas/NewPayment",
        "/components/securitySchemes",
    ] {
        assert_eq!(
            before.pointer(unchanged),
            after.pointer(unchanged),
            "{unchanged}"
        );
    }
    let post = &after["paths"]["/payments"]["post"];
    assert_eq!(
        post["requestBody"],
        before["paths"]["/payments"]["post"]["requestBody"]
    );
    assert_eq!(post["parameters"][0]["name"], "Idempotency-Key");
    assert_eq!(post["parameters"][0]["required"], true);
    assert_eq!(post["parameters"][1]["name"], "delay_ms");
    assert_eq!(post["x-idempotency"]["recordTtlSeconds"], 86400);
    let created = &post["responses"]["201"];
    assert_eq!(
        created["content"],
        before["paths"]["/payments"]["post"]["responses"]["201"]["content"]
    );
    assert!(created["headers"]["Location"].is_object());
    assert!(created["headers"]["Idempotent-Replayed"].is_object());
    assert!(created["headers"]["Idempotency-Key-Lifetime"].is_object());
    let bad = &post["responses"]["400"]["content"];
    assert!(bad["application/json"].is_object() && bad["application/problem+json"].is_object());
    for status in [
        "401", "409", "410", "413", "422", "500", "502", "503", "504",
    ] {
        assert!(
            post["responses"][status]["content"]["application/problem+json"].is_object(),
            "{status}"
        );
    }
    assert!(post["responses"]["409"]["headers"]["Retry-After"].is_object());
    assert!(post["responses"]["503"]["headers"]["Retry-After"].is_object());

    let json_source = data("openapi/payments-3.1.json");
    let (code, log, merged) = openapi(
        dir.path(),
        "m.json",
        &["--merge", json_source.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{log}");
    let v: Value = serde_json::from_str(&merged).expect("JSON kept");
    assert_eq!(v["openapi"], "3.1.0");
    assert!(v["paths"]["/payments"]["post"]["x-idempotency"].is_object());
    let source = std::fs::read_to_string(&json_source).unwrap();
    assert_same_order(&source, &merged);
}

/// The members of the source's objects keep their order in the merged text (the merge only
/// appends), checked on the top level, the paths and one operation.
fn assert_same_order(source: &str, merged: &str) {
    use idemgate_tower::openapi::Doc;
    let keys = |d: Option<&Doc>| -> Vec<String> {
        d.and_then(Doc::as_object)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    };
    let (a, b): (Doc, Doc) = (
        serde_saphyr::from_str(source).unwrap(),
        serde_saphyr::from_str(merged).unwrap(),
    );
    let post = |d: &Doc| {
        d.get("paths")
            .and_then(|p| p.get("/payments"))
            .and_then(|p| p.get("post"))
            .cloned()
    };
    for (before, after) in [
        (keys(Some(&a)), keys(Some(&b))),
        (keys(a.get("paths")), keys(b.get("paths"))),
        (keys(post(&a).as_ref()), keys(post(&b).as_ref())),
    ] {
        let kept: Vec<&String> = after.iter().filter(|k| before.contains(k)).collect();
        assert_eq!(kept, before.iter().collect::<Vec<_>>(), "order kept");
    }
}

#[test]
fn refuses_what_it_cannot_merge() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text, expect) in [
        (
            "swagger.json",
            "{\"swagger\": \"2.0\", \"paths\": {}}",
            "not an OpenAPI description",
        ),
        ("v2.yaml", "openapi: 2.0\npaths: {}\n", "is not supported"),
        (
            "broken.yaml",
            "openapi: 3.0.3\npaths: [\n",
            "not valid YAML",
        ),
        ("broken.json", "{\"openapi\": ", "not valid JSON"),
        (
            "paths.json",
            "{\"openapi\": \"3.1.0\", \"paths\": []}",
            "`paths` must be an object",
        ),
    ] {
        let file = dir.path().join(name);
        std::fs::write(&file, text).unwrap();
        let (code, log) = run_idemgate(&["openapi", "--merge", file.to_str().unwrap()]);
        assert_eq!(code, 2, "{name}: {log}");
        assert!(
            log.contains("--merge") && log.contains(expect),
            "{name}: {log}"
        );
        assert!(!log.contains("panicked"), "{log}");
    }
    let (code, log) = run_idemgate(&["openapi", "--merge", "/nonexistent/api.yaml"]);
    assert_eq!(code, 2, "{log}");
    assert!(log.contains("cannot read"), "{log}");
}

#[tokio::test]
async fn fragment_and_merge_validate() {
    let Some(python) = python("fragment_and_merge_validate") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let yaml_src = data("openapi/payments.yaml").display().to_string();
    let json_src = data("openapi/payments-3.1.json").display().to_string();
    let cases: [(&str, Vec<&str>); 4] = [
        ("fragment.json", vec![]),
        ("fragment.yaml", vec!["--format", "yaml"]),
        ("merged.yaml", vec!["--merge", &yaml_src]),
        ("merged.json", vec!["--merge", &json_src]),
    ];
    for (name, args) in cases {
        let (code, log, written) = openapi(dir.path(), name, &args);
        assert_eq!(code, 0, "{name}: {log}");
        assert!(!written.is_empty(), "{name}");
        let mut cmd = Command::new(&python);
        cmd.args(["-m", "openapi_spec_validator"])
            .arg(dir.path().join(name));
        let out = output_within(cmd, Duration::from_secs(120)).await;
        assert!(
            out.status.success(),
            "{name} does not validate: {}",
            text(&out)
        );
        assert!(text(&out).contains(": OK"), "{}", text(&out));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_gateway_5xx() {
    let Some(python) = python("schemathesis_finds_no_gateway_5xx") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let source = data("openapi/payments.yaml").display().to_string();
    let (code, log, _) = openapi(dir.path(), "merged.yaml", &["--merge", &source]);
    assert_eq!(code, 0, "{log}");
    let (gw, ledger) = payments_gateway().await;
    let mut cmd = Command::new(&python);
    cmd.args(["-m", "schemathesis.cli", "run"])
        .arg(dir.path().join("merged.yaml"))
        .args(["--url", &gw.base])
        .args(["--checks", "not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance"])
        .args(["--phases", "examples,coverage,fuzzing", "--max-examples", "40"])
        .args(["--seed", "20261201", "--no-color"])
        .args(["-H", "Authorization: Bearer schemathesis"])
        .env("SCHEMATHESIS_HOOKS", "")
        .current_dir(dir.path());
    let out = output_within(cmd, Duration::from_secs(300)).await;
    let report = text(&out);
    gw.stop().await;
    assert!(
        out.status.success(),
        "schemathesis found problems:\n{report}"
    );
    assert!(report.contains("No issues found"), "{report}");
    let generated: usize = report
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_suffix(" passed")
                .and_then(|l| l.split(" generated").next())
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0);
    assert!(
        generated >= 50,
        "schemathesis ran {generated} cases:\n{report}"
    );
    assert!(ledger.count() > 0, "some payments went through the gateway");
}
