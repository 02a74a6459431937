//! `idemgate key-service`: the Python black-box suite against the running binary, the
//! OpenAPI document (openapi-spec-validator, schemathesis), and the gateway on an
//! `idemgate://` store.

use crate::support::key_service::*;

/// Runs `python -m MODULE ARGS...` with the key service's address and tokens in the
/// environment; asserts it succeeded, showing its output.
fn run_python(python: &std::path::Path, ks: &KeyServiceProcess, args: &[&str]) {
    let out = std::process::Command::new(python)
        .args(args)
        .current_dir(python_dir())
        .env("KS_BASE", ks.base())
        .env("KS_TOKEN_A", TOKEN_A)
        .env("KS_TOKEN_B", TOKEN_B)
        .env("KS_TOKEN_ADMIN", TOKEN_ADMIN)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(out.status.success(), "{args:?} failed:\n{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn python_black_box() {
    let Some(python) = python() else { return };
    let ks = spawn(None, None).await;
    let python2 = python.clone();
    let ks = tokio::task::spawn_blocking(move || {
        run_python(
            &python2,
            &ks,
            &[
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "test_key_service.py",
            ],
        );
        ks
    })
    .await
    .unwrap();
    drop(ks);
}

#[tokio::test(flavor = "multi_thread")]
async fn openapi_document_validates_and_schemathesis_finds_no_server_error() {
    let Some(python) = python() else { return };
    let ks = spawn(None, None).await;
    tokio::task::spawn_blocking(move || {
        let base = ks.base();
        run_python(&python, &ks, &["check_openapi.py", &base]);
        let schemathesis = python.with_file_name("schemathesis");
        let auth = format!("Authorization: Bearer {TOKEN_A}");
        let out = std::process::Command::new(schemathesis)
            .args(["run", &format!("{base}/v1/openapi.json")])
            .args(["--checks", "not_a_server_error", "--header", &auth])
            .args(["--max-examples", "50", "--seed", "1", "--no-color"])
            .env("SCHEMATHESIS_HOOKS", "")
            // Its example database goes to the temporary directory, not the checkout.
            .current_dir(ks.dir.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        println!("{text}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "schemathesis found failures:\n{text}");
        assert!(text.contains("passed"), "{text}");
        drop(ks);
    })
    .await
    .unwrap();
}

/// The README's "The key service" section.
fn readme_section() -> String {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let start = readme
        .find("\n## The key service\n")
        .expect("README has the section");
    let rest = &readme[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    rest[..end].to_owned()
}

/// `docs/key-service.md`, the key service's page.
fn key_service_page() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/key-service.md"
    ))
    .unwrap()
}

/// The first fenced block of `lang` in `text`.
fn block(text: &str, lang: &str) -> String {
    let open = format!("```{lang}\n");
    let start = text
        .find(&open)
        .unwrap_or_else(|| panic!("no {lang} block"))
        + open.len();
    let len = text[start..].find("```").unwrap();
    text[start..start + len].to_owned()
}

#[test]
fn readme_configuration_is_valid() {
    // The README shows the same configuration as the key service's page.
    assert_eq!(
        block(&readme_section(), "sh"),
        block(&key_service_page(), "sh")
    );
    let sh = block(&readme_section(), "sh");
    let toml = sh
        .split("<<TOML\n")
        .nth(1)
        .unwrap()
        .split("\nTOML")
        .next()
        .unwrap();
    let hash = "0".repeat(64);
    let toml = toml.replace("$(printf %s \"$TOKEN\" | sha256sum | cut -d' ' -f1)", &hash);
    assert!(toml.contains(&hash), "{toml}");
    let config = idemgate_gateway::config::Config::from_toml(&toml).unwrap();
    let resolved = idemgate_gateway::key_service::resolve(config, &mut Vec::new()).unwrap();
    assert_eq!(resolved.service.listen.to_string(), "127.0.0.1:8081");
}

#[tokio::test(flavor = "multi_thread")]
async fn readme_python_example_runs_the_operation_once() {
    let Some(python) = python() else { return };
    let ks = spawn(None, None).await;
    let script = ks.dir.path().join("readme_example.py");
    std::fs::write(&script, block(&key_service_page(), "python")).unwrap();
    let base = ks.base();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .arg(&script)
            .env("IDEMGATE_URL", base)
            .env("IDEMGATE_TOKEN", TOKEN_A)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines, ["(201, {'payment': 'pay_1', 'amount': 1000})"; 2],
        "{stdout}"
    );
    drop(ks);
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_never_appear_in_the_log_even_at_trace_level() {
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let store = format!("sqlite://{}", dir.path().join("ks.db").display());
    let config = dir.path().join("ks.toml");
    std::fs::write(&config, config_text(&store, &addr, "")).unwrap();
    let log = dir.path().join("stderr.log");
    let child = command(&config)
        .env("RUST_LOG", "trace")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_for(&addr).await;
    let mut ks = KeyServiceProcess {
        child,
        addr: addr.clone(),
        dir,
    };
    let client = crate::support::client();
    let wrong = "wrong-secret-token-4711";
    for token in [TOKEN_A, wrong] {
        let body = serde_json::json!({"scope": "POST /p", "principal": "u", "key": "key-0000000001", "fingerprint": "f"});
        let resp = client
            .post(format!("{}/v1/acquire", ks.base()))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(resp.status() == 200 || resp.status() == 401);
    }
    ks.kill();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("key service listening"), "{text}");
    for secret in [TOKEN_A, wrong] {
        assert!(!text.contains(secret), "the log holds a token:\n{text}");
    }
}

#[test]
fn key_service_config_errors_name_their_field() {
    let text = "[key_service]\nlisn = \"x\"\nlisten = \"nowhere\"\n[[key_service.clients]]\nname = \"p\"\nnamespace = \"Bad\"\ntoken_sha256 = \"abc\"\ntokn_file = \"f\"\n";
    let (config, file_errs) = idemgate_gateway::config::Config::from_toml_lenient(text).unwrap();
    let err = idemgate_gateway::key_service::resolve(config.clone(), &mut file_errs.clone())
        .unwrap_err()
        .to_string();
    for want in [
        "`key_service.lisn`: unknown key",
        "`key_service.clients[0].tokn_file`: unknown key",
        "key_service.listen: `nowhere` is not host:port",
        "key_service.clients[0].namespace",
        "key_service.clients[0].token_sha256: must be 64 hex digits",
    ] {
        assert!(err.contains(want), "{want} in {err}");
    }
    // `config check` (and `serve`) report the section too.
    let errs = config.validate().unwrap_err().join("\n");
    assert!(errs.contains("key_service.clients[0].namespace"), "{errs}");
    // A key service never keeps its records in another one.
    let text = "store = \"idemgate://127.0.0.1:1\"\n";
    let config = idemgate_gateway::config::Config::from_toml(text).unwrap();
    let err = idemgate_gateway::key_service::resolve(config, &mut Vec::new()).unwrap_err();
    assert!(
        err.to_string().contains("store: a key service cannot"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn admin_endpoints_answer_and_sigterm_shuts_down_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, admin) = (free_addr(), free_addr());
    let store = format!("sqlite://{}", dir.path().join("ks.db").display());
    let text = config_text(&store, &addr, "").replace(
        "admin_listen = \"\"",
        &format!("admin_listen = \"{admin}\""),
    );
    let config = dir.path().join("ks.toml");
    std::fs::write(&config, text).unwrap();
    let child = start(&config);
    wait_for(&addr).await;
    wait_for(&admin).await;
    let pid = child.id().to_string();
    let mut ks = KeyServiceProcess {
        child,
        addr: addr.clone(),
        dir,
    };
    let client = crate::support::client();
    let body = serde_json::json!({"scope": "POST /p", "principal": "u", "key": "key-0000000001", "fingerprint": "f"});
    let resp = client
        .post(format!("{}/v1/acquire", ks.base()))
        .bearer_auth(TOKEN_A)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let acquired: serde_json::Value = resp.json().await.unwrap();
    // The audit entry of `idemgate resolve` is reserved: a caller cannot forge one.
    let complete = serde_json::json!({"scope": "POST /p", "principal": "u",
        "key": "key-0000000001", "lease": acquired["lease"],
        "response": {"status": 201, "body_base64": "",
            "headers": [["Idempotent-Resolved", "{\"by\":\"mallory\"}"]]}});
    let forged = client
        .post(format!("{}/v1/complete", ks.base()))
        .bearer_auth(TOKEN_A)
        .json(&complete)
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 400);
    let problem = forged.text().await.unwrap();
    assert!(problem.contains("reserved"), "{problem}");
    let get = |path: &str| client.get(format!("http://{admin}{path}")).send();
    assert_eq!(get("/healthz").await.unwrap().text().await.unwrap(), "ok\n");
    let ready = get("/readyz").await.unwrap();
    assert_eq!(ready.status(), 200);
    let metrics = get("/metrics").await.unwrap().text().await.unwrap();
    for name in [
        "idempotency_key_service_requests_total",
        "idempotency_key_service_decisions_total",
        "idempotency_store_duration_seconds",
    ] {
        assert!(metrics.contains(name), "{name} in:\n{metrics}");
    }
    let term = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(term.success());
    let status = tokio::task::spawn_blocking(move || {
        for _ in 0..100 {
            if let Some(s) = ks.child.try_wait().unwrap() {
                return Some(s);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        None
    })
    .await
    .unwrap()
    .expect("exits within 5 s of SIGTERM");
    assert!(status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_ends_the_acquires_that_wait_with_in_flight() {
    let mut ks = spawn(None, None).await;
    let client = crate::support::client();
    let acquire = {
        let (client, url) = (client.clone(), format!("{}/v1/acquire", ks.base()));
        move |wait_ms: u64| {
            let body = serde_json::json!({"scope": "POST /p", "principal": "u",
                "key": "key-0000000042", "fingerprint": "f", "wait_ms": wait_ms});
            client.post(&url).bearer_auth(TOKEN_A).json(&body).send()
        }
    };
    let first: serde_json::Value = acquire(0).await.unwrap().json().await.unwrap();
    assert_eq!(first["decision"], "run", "{first}");
    let waiters: Vec<_> = (0..3).map(|_| tokio::spawn(acquire(60_000))).collect();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    // SIGTERM: a shutdown, whose drain would otherwise wait out the 60 s waits.
    let pid = ks.child.id().to_string();
    let term = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    assert!(term.unwrap().success());
    for waiter in waiters {
        let resp = waiter
            .await
            .unwrap()
            .expect("an answer, not a cut connection");
        assert_eq!(resp.status(), 200);
        let answer: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(answer["decision"], "in_flight", "{answer}");
    }
    let exited = ks.child.wait().unwrap();
    assert!(exited.success(), "{exited:?}");
}
