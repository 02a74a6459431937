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
