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

/// A gateway in this process on `idemgate://addr` (store deadline 1 s).
async fn gateway_on(
    up: &crate::support::Upstream,
    addr: &str,
    dir: &std::path::Path,
) -> crate::support::Gateway {
    let token = dir.join("gateway.token");
    std::fs::write(&token, TOKEN_A).unwrap();
    crate::support::gateway(&up.base, &format!("idemgate://{addr}"), |c| {
        c.store_token_file = token.display().to_string();
        c.store_timeout = "1s".into();
        c.purge_interval = "0s".into();
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn key_service_killed_is_503_within_the_timeout_and_nothing_runs_unrecorded() {
    use crate::support::{assert_problem, key, post, upstream};
    let up = upstream().await;
    let mut ks = spawn(None, None).await;
    let addr = ks.addr.clone();
    let gw = gateway_on(&up, &addr, ks.dir.path()).await;
    let first = key();
    let resp = post(&gw.base, "/payments", Some(&first), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(up.count(), 1);

    ks.kill(); // SIGKILL: a crash, not a shutdown
    for k in [key(), first.clone()] {
        let started = tokio::time::Instant::now();
        let resp = post(&gw.base, "/payments", Some(&k), "{}")
            .send()
            .await
            .unwrap();
        assert_problem(resp, 503, "store-unavailable").await;
        // Bounded by the store deadline (1 s), with room for a loaded machine.
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
    assert_eq!(
        up.count(),
        1,
        "nothing was forwarded while the key service was down"
    );

    // Back on the same file: the first key replays, nothing runs twice.
    let config = ks.dir.path().join("ks.toml");
    let child = start(&config);
    wait_for(&addr).await;
    let restarted = KeyServiceProcess {
        child,
        addr: addr.clone(),
        dir: tempfile::tempdir().unwrap(),
    };
    let resp = post(&gw.base, "/payments", Some(&first), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(resp.headers()["idempotent-replayed"], "true");
    assert_eq!(up.count(), 1);
    drop(restarted);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_service_that_never_answers_is_503_and_nothing_runs() {
    use crate::support::{assert_problem, key, post, upstream, Relay};
    let up = upstream().await;
    let ks = spawn(None, None).await;
    let relay = Relay::start(&ks.addr).await;
    let via = format!("127.0.0.1:{}", relay.port);
    let gw = gateway_on(&up, &via, ks.dir.path()).await;
    let resp = post(&gw.base, "/payments", Some(&key()), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    relay.black_hole();
    let started = tokio::time::Instant::now();
    let resp = post(&gw.base, "/payments", Some(&key()), "{}")
        .send()
        .await
        .unwrap();
    assert_problem(resp, 503, "store-unavailable").await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(up.count(), 1);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_with_a_wrong_token_fails_closed() {
    use crate::support::{assert_problem, key, post, upstream};
    let up = upstream().await;
    let ks = spawn(None, None).await;
    let token = ks.dir.path().join("wrong.token");
    std::fs::write(&token, "not-a-client").unwrap();
    let gw = crate::support::gateway(&up.base, &format!("idemgate://{}", ks.addr), |c| {
        c.store_token_file = token.display().to_string();
    })
    .await;
    let resp = post(&gw.base, "/payments", Some(&key()), "{}")
        .send()
        .await
        .unwrap();
    assert_problem(resp, 503, "store-unavailable").await;
    assert_eq!(up.count(), 0);
    gw.stop().await;
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
    std::fs::write(&script, block(&readme_section(), "python")).unwrap();
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

#[tokio::test(flavor = "multi_thread")]
async fn idemgates_reaches_a_key_service_over_tls_and_an_untrusted_one_fails_closed() {
    use crate::support::{assert_problem, key, post, upstream};
    let dir = tempfile::tempdir().unwrap();
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let (cert, pem_key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&pem_key, ck.signing_key.serialize_pem()).unwrap();
    let addr = free_addr();
    let store = format!("sqlite://{}", dir.path().join("ks.db").display());
    let tls = format!(
        "tls_cert_file = \"{}\"\ntls_key_file = \"{}\"",
        cert.display(),
        pem_key.display()
    );
    let config = dir.path().join("ks.toml");
    std::fs::write(&config, config_text(&store, &addr, &tls)).unwrap();
    let child = start(&config);
    wait_for(&addr).await;
    let port = addr.rsplit(':').next().unwrap().to_owned();
    let ks = KeyServiceProcess { child, addr, dir };
    let token = ks.dir.path().join("token");
    std::fs::write(&token, TOKEN_A).unwrap();
    let up = upstream().await;
    let token = token.display().to_string();
    let on = |url: String, ca: Option<String>| {
        let (base, token) = (up.base.clone(), token.clone());
        async move {
            crate::support::gateway(&base, &url, move |c| {
                c.store_token_file = token;
                c.store_ca_file = ca.unwrap_or_default();
            })
            .await
        }
    };
    let trusted = on(
        format!("idemgates://localhost:{port}"),
        Some(cert.display().to_string()),
    )
    .await;
    let k = key();
    for replayed in [false, true] {
        let resp = post(&trusted.base, "/payments", Some(&k), "{}")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
        assert_eq!(resp.headers().contains_key("idempotent-replayed"), replayed);
    }
    assert_eq!(up.count(), 1);
    // Not trusted (system roots), or plain HTTP to the TLS port: 503, nothing forwarded.
    for (url, ca) in [
        (format!("idemgates://localhost:{port}"), None),
        (format!("idemgate://localhost:{port}"), None),
    ] {
        let gw = on(url, ca).await;
        let resp = post(&gw.base, "/payments", Some(&key()), "{}")
            .send()
            .await
            .unwrap();
        assert_problem(resp, 503, "store-unavailable").await;
        gw.stop().await;
    }
    assert_eq!(up.count(), 1);
    trusted.stop().await;
    drop(ks);
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
