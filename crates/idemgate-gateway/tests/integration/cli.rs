//! The `idemgate` binary's command line.

use crate::support::run_idemgate;

fn idemgate(args: &[&str]) -> (i32, String) {
    run_idemgate(args)
}

#[test]
fn config_check_accepts_the_example() {
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/gateway.example.toml"
    );
    let (code, text) = idemgate(&["config", "check", example]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("ok"), "{text}");
}

#[test]
fn config_check_reports_every_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(
        &file,
        "upstream = \"http://127.0.0.1:3000\"\nlisten = \"x\"\n[defaults]\nlease_ttl = \"forever\"\n[[routes]]\nroute = \"POST /p\"\nmismatch_status = 418\n",
    )
    .unwrap();
    let (code, text) = idemgate(&["config", "check", file.to_str().unwrap()]);
    assert_eq!(code, 2, "{text}");
    for field in [
        "listen:",
        "defaults.lease_ttl:",
        "routes[0].mismatch_status:",
    ] {
        assert!(text.contains(field), "{field} in {text}");
    }
    std::fs::write(
        &file,
        "upstream = \"http://127.0.0.1:3000\"\nstroe = \"memory://\"\n",
    )
    .unwrap();
    let (code, text) = idemgate(&["config", "check", file.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(text.contains("stroe"), "{text}");
}

#[test]
fn serve_names_bad_flags() {
    let (code, text) = idemgate(&[
        "serve",
        "--upstream",
        "http://127.0.0.1:1",
        "--store",
        "mysql://x",
        "--listen",
        "nope",
    ]);
    assert_eq!(code, 2);
    assert!(
        text.contains("store:") && text.contains("listen:"),
        "{text}"
    );
    let (code, text) = idemgate(&["serve"]);
    assert_eq!(code, 2);
    assert!(text.contains("upstream: missing"), "{text}");
}

#[test]
fn purge_runs_on_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("p.db").display());
    let (code, text) = idemgate(&["migrate", "--store", &store]);
    assert_eq!(code, 0, "{text}");
    let (code, text) = idemgate(&["purge", "--store", &store, "--batch", "10"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("purged 0"), "{text}");
}

#[test]
fn purge_refuses_a_store_file_that_does_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typo.db");
    let (code, text) = idemgate(&["purge", "--store", &format!("sqlite://{}", path.display())]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("does not exist"), "{text}");
    assert!(!path.exists(), "no database was created");
}

/// A file for the commands that do not forward: a store and routes, no `upstream`.
fn file_without_upstream(dir: &std::path::Path) -> (std::path::PathBuf, String) {
    let store = format!("sqlite://{}", dir.join("s.db").display());
    let file = dir.join("no-upstream.toml");
    let text = format!(
        "store = \"{store}\"\npurge_interval = \"0s\"\n[[routes]]\nroute = \"POST /payments\"\n"
    );
    std::fs::write(&file, text).unwrap();
    (file, store)
}

#[test]
fn openapi_and_admin_commands_need_no_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let (file, store) = file_without_upstream(dir.path());
    let file = file.to_str().unwrap();
    let (code, text) = idemgate(&["openapi", "--config", file]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("/payments"), "{text}");
    let (code, text) = idemgate(&["migrate", "--store", &store]);
    assert_eq!(code, 0, "{text}");
    let (code, text) = idemgate(&["stats", "--config", file]);
    assert_eq!(code, 0, "{text}");
    let (code, text) = idemgate(&["inspect", "--config", file, "--key", "k-12345678"]);
    assert_eq!(code, 0, "{text}");
    assert!(!text.contains("upstream"), "{text}");
    // `config check` reports the missing upstream as a note, not an error.
    let (code, text) = idemgate(&["config", "check", file]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("`upstream` is not set"), "{text}");
}

#[test]
fn key_service_starts_from_a_file_without_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = file_without_upstream(dir.path());
    let listen = crate::support::key_service::free_addr();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args([
            "key-service",
            "--admin-listen",
            "",
            "--listen",
            &listen,
            "--config",
        ])
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Up to 20 s for the listener.
    let mut up = false;
    for _ in 0..400 {
        up = std::net::TcpStream::connect(&listen).is_ok();
        if up || child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    assert!(up, "{}", String::from_utf8_lossy(&out.stderr));
}

/// A file naming `store`, without upstream.
fn store_file(dir: &std::path::Path, store: &str) -> std::path::PathBuf {
    let file = dir.join("store.toml");
    std::fs::write(&file, format!("store = \"{store}\"\n")).unwrap();
    file
}

#[test]
fn config_check_connect_reads_a_sqlite_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let file = store_file(dir.path(), &format!("sqlite://{}", db.display()));
    let file = file.to_str().unwrap();
    // The file does not exist yet: nothing is created, and the check fails.
    let (code, text) = idemgate(&["config", "check", "--connect", file]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("does not exist") && !db.exists(), "{text}");
    let (code, text) = idemgate(&["migrate", "--config", file]);
    assert_eq!(code, 0, "{text}");
    let (code, text) = idemgate(&["config", "check", "--connect", file]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains(&format!("{file}: ok\n")), "{text}");
    assert!(text.contains("store: sqlite answers\n"), "{text}");
    assert!(
        text.contains("durability: the sqlite store is local: "),
        "{text}"
    );
    assert!(text.contains("  synchronous = \"normal\"\n"), "{text}");
}

#[test]
fn config_check_connect_fails_on_a_store_that_does_not_answer() {
    let dir = tempfile::tempdir().unwrap();
    let file = store_file(dir.path(), "postgres://app:secret@127.0.0.1:1/pay");
    let (code, text) = idemgate(&["config", "check", "--connect", file.to_str().unwrap()]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("ok\n") && text.contains("error: "), "{text}");
    assert!(
        !text.contains("secret") && !text.contains("durability:"),
        "{text}"
    );
}

#[test]
fn config_check_connect_reads_postgres_and_redis() {
    for (var, durability) in [
        (
            "IDEMGATE_TEST_DATABASE_URL",
            "durability: the postgres store is local: ",
        ),
        (
            "IDEMGATE_TEST_REDIS_URL",
            "durability: the redis store is volatile: ",
        ),
    ] {
        let Some(url) = crate::support::test_url(var) else {
            continue;
        };
        let dir = tempfile::tempdir().unwrap();
        let file = store_file(dir.path(), &url);
        let (code, text) = idemgate(&["config", "check", "--connect", file.to_str().unwrap()]);
        assert_eq!(code, 0, "{text}");
        assert!(text.contains(durability), "{var}: {text}");
        assert!(text.lines().any(|l| l.starts_with("  ")), "facts: {text}");
    }
}

#[test]
fn serve_logs_what_the_store_can_lose_in_one_line() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("s.db").display());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["serve", "--listen", "127.0.0.1:0", "--admin-listen", ""])
        .args(["--upstream", "http://127.0.0.1:1", "--store", &store])
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut found = Vec::new();
    // Up to 20 s for the line, then 2 s more for a second one that must not come.
    let mut wait = std::time::Duration::from_secs(20);
    while let Ok(line) = rx.recv_timeout(wait) {
        if line.contains("store durability") {
            found.push(line);
            wait = std::time::Duration::from_secs(2);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(found.len(), 1, "{found:?}");
    // The default store is one host's file by design: said at INFO, not as a warning.
    assert!(found[0].contains("INFO"), "{}", found[0]);
    assert!(
        found[0].contains("the sqlite store is local: commits survive a crash of the process"),
        "{}",
        found[0]
    );
}
