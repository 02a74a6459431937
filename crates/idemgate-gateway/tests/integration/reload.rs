//! `SIGHUP` re-reads the configuration file of the real `idemgate` binary: a good file
//! applies its policy to new requests, a bad one is rejected and the old one kept, and both
//! are logged (with the settings that need a restart named) and counted in
//! `idempotency_config_reloads_total{result}` on `/metrics`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::key_service::{free_addr, wait_for};
use crate::support::{assert_problem, key, post, scrape, upstream, Process, Upstream};

fn hup(p: &Process) {
    let status = Command::new("kill")
        .args(["-HUP", &p.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits (10 s at most) until the log holds `needle` `n` times; returns the log.
async fn log_with(log: &Path, needle: &str, n: usize) -> String {
    for _ in 0..200 {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.matches(needle).count() >= n {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "the log never had {needle:?} {n} times:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// Starts the binary with `file` (its log in `log`), once it listens; with the address of
/// its admin listener.
async fn start(up: &Upstream, file: &Path, log: &Path) -> (Process, String) {
    let (listen, admin) = (free_addr(), free_addr());
    let child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args([
            "serve",
            "--listen",
            &listen,
            "--admin-listen",
            &admin,
            "--upstream",
            &up.base,
        ])
        .arg("--config")
        .arg(file)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let gw = Process {
        child,
        base: format!("http://{listen}"),
    };
    log_with(log, "idemgate gateway listening", 1).await;
    wait_for(&admin).await;
    (gw, admin)
}

/// `idempotency_config_reloads_total` on `admin`'s `/metrics`: applied, refused, invalid.
async fn reloads(admin: &str) -> [u64; 3] {
    let text = scrape(&format!("http://{admin}")).await;
    ["applied", "refused", "invalid"].map(|result| {
        let series = format!("idempotency_config_reloads_total{{result=\"{result}\"}} ");
        let line = text.lines().find_map(|l| l.strip_prefix(series.as_str()));
        line.unwrap_or_else(|| panic!("no {series} in:\n{text}"))
            .parse()
            .unwrap()
    })
}

#[tokio::test]
async fn sighup_applies_a_good_file_and_keeps_the_old_one_on_errors() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (file, log) = (dir.path().join("gw.toml"), dir.path().join("gw.log"));
    std::fs::write(
        &file,
        "store = \"memory://\"\n[defaults]\nkey_required = false\n",
    )
    .unwrap();
    let (gw, admin) = start(&up, &file, &log).await;
    assert_eq!(reloads(&admin).await, [0, 0, 0], "registered at 0");
    let resp = post(&gw.base, "/payments", None, "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201, "keys are optional at first");

    // A good file: keys become required; the store change needs a restart.
    let db = dir.path().join("later.db");
    std::fs::write(
        &file,
        format!(
            "store = \"sqlite://{}\"\n[defaults]\nkey_required = true\n",
            db.display()
        ),
    )
    .unwrap();
    hup(&gw);
    let text = log_with(&log, "configuration reloaded", 1).await;
    assert!(
        text.contains("`store` changed but only takes effect after a restart"),
        "{text}"
    );
    let resp = post(&gw.base, "/payments", None, "{}")
        .send()
        .await
        .unwrap();
    assert_problem(resp, 400, "missing-key").await;
    assert!(!db.exists(), "the running store stays");
    assert_eq!(reloads(&admin).await, [1, 0, 0]);

    // A bad file: every error logged, the running configuration stays.
    std::fs::write(
        &file,
        "store = \"memory://\"\n[defaults]\nkey_required = \"no\"\nlease_ttl = \"forever\"\n",
    )
    .unwrap();
    hup(&gw);
    let text = log_with(&log, "configuration reload rejected", 1).await;
    let rejected = text.split("configuration reload rejected").nth(1).unwrap();
    assert!(
        rejected.contains("defaults.key_required") && rejected.contains("defaults.lease_ttl"),
        "{text}"
    );
    let resp = post(&gw.base, "/payments", None, "{}")
        .send()
        .await
        .unwrap();
    assert_problem(resp, 400, "missing-key").await;
    let resp = post(&gw.base, "/payments", Some(&key()), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(up.count(), 2, "the rejected requests were not forwarded");
    assert_eq!(text.matches("configuration reloaded").count(), 1);
    assert_eq!(
        reloads(&admin).await,
        [1, 0, 1],
        "the bad file counted invalid"
    );
}

/// A reload that would move keys in flight into another scope (a template now matching
/// their path, another principal source) is refused and logged: a retry across it replays.
#[tokio::test]
async fn a_scope_changing_reload_is_refused_and_a_retry_across_it_replays() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (file, log) = (dir.path().join("gw.toml"), dir.path().join("gw.log"));
    let base = "store = \"memory://\"\n";
    std::fs::write(&file, base).unwrap();
    let (gw, admin) = start(&up, &file, &log).await;
    let k = key();
    let first = post(&gw.base, "/payments/1", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 201);
    assert_eq!(up.count(), 1);

    let changes = [
        (
            format!("{base}[[routes]]\nroute = \"POST /payments/{{id}}\"\n"),
            "routes: `POST /payments/{id}` added",
        ),
        (
            format!("{base}[defaults]\nprincipal = \"header:x-user-id\"\n"),
            "defaults.principal (`authorization` to `header:x-user-id`)",
        ),
    ];
    for (n, (text, named)) in changes.iter().enumerate() {
        std::fs::write(&file, text).unwrap();
        hup(&gw);
        let logged = log_with(&log, "configuration reload refused", n + 1).await;
        let refusal = logged.split("configuration reload refused").last().unwrap();
        assert!(refusal.contains(named), "{logged}");
        // Under the refused file this retry's scope would be new: it would run again.
        let retry = post(&gw.base, "/payments/1", Some(&k), "{}")
            .header("x-user-id", "alice")
            .send()
            .await
            .unwrap();
        assert_eq!(retry.status(), 201);
        assert_eq!(retry.headers()["idempotent-replayed"], "true");
        assert_eq!(
            up.count(),
            1,
            "the retry across the reload did not run again"
        );
    }
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(!logged.contains("configuration reloaded"), "{logged}");
    assert_eq!(reloads(&admin).await, [0, 2, 0], "both counted refused");
}

/// With `allow_scope_change_on_reload = true` the reload applies; the next one is compared
/// with it (not with the file the gateway started with), and one changing only a TTL
/// applies without the allowance.
#[tokio::test]
async fn an_allowed_scope_change_applies_and_later_reloads_compare_with_it() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (file, log) = (dir.path().join("gw.toml"), dir.path().join("gw.log"));
    let base = "store = \"memory://\"\n";
    std::fs::write(&file, base).unwrap();
    let (gw, admin) = start(&up, &file, &log).await;

    let route = "[[routes]]\nroute = \"POST /payments/{id}\"\nkey_required = true\n";
    let allowed = format!("{base}allow_scope_change_on_reload = true\n{route}");
    std::fs::write(&file, allowed).unwrap();
    hup(&gw);
    let logged = log_with(&log, "configuration reloaded", 1).await;
    assert!(
        logged.contains("allow_scope_change_on_reload = true")
            && logged.contains("routes: `POST /payments/{id}` added"),
        "the change is logged: {logged}"
    );
    let resp = post(&gw.base, "/payments/2", None, "{}")
        .send()
        .await
        .unwrap();
    assert_problem(resp, 400, "missing-key").await;

    let ttl = format!("{base}[defaults]\nrecord_ttl = \"1h\"\nrecord_ttl_header = true\n{route}");
    std::fs::write(&file, ttl).unwrap();
    hup(&gw);
    let logged = log_with(&log, "configuration reloaded", 2).await;
    assert!(!logged.contains("configuration reload refused"), "{logged}");
    let resp = post(&gw.base, "/payments/3", Some(&key()), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(resp.headers()["idempotency-key-lifetime"], "3600");
    assert_eq!(reloads(&admin).await, [2, 0, 0]);
}
