//! `forward_journal_file` end to end: `serve` refuses it on a store that is not PostgreSQL,
//! naming the key; on PostgreSQL `serve` opens and locks the journal, and every other command
//! on the same file (`migrate`, `stats`, `inspect`, `purge`, `config check --connect`) still
//! runs beside it, because none of them opens the journal.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::admin::idemgate;
use crate::support::*;

/// Runs `idemgate serve` on `config` (no admin listener) until it exits, killing it after
/// 30 s; its output.
fn serve_until_exit(config: &Path) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["serve", "--listen", "127.0.0.1:0", "--admin-listen", ""])
        .args(["--upstream", "http://127.0.0.1:1", "--config"])
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for _ in 0..300 {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    child.wait_with_output().unwrap()
}

#[test]
fn serve_refuses_a_journal_on_a_store_that_is_not_postgresql() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.toml");
    let store = dir.path().join("idem.db");
    let journal = dir.path().join("journal.db");
    let text = format!(
        "store = \"sqlite://{}\"\nforward_journal_file = \"{}\"\n",
        store.display(),
        journal.display()
    );
    std::fs::write(&file, text).unwrap();
    let out = serve_until_exit(&file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "serve must refuse: {stderr}");
    assert!(
        stderr.contains("forward_journal_file: PostgreSQL only"),
        "{stderr}"
    );
    assert!(!journal.exists(), "no journal is created");
    let (code, text) = run_idemgate(&["config", "check", file.to_str().unwrap()]);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("forward_journal_file: PostgreSQL only"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_serve_opens_the_journal_and_the_other_commands_run_beside_it() {
    let Some(url) = test_url("IDEMGATE_TEST_DATABASE_URL") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (file, journal) = (dir.path().join("gw.toml"), dir.path().join("journal.db"));
    let table = format!("idem_fj_{:012x}", rand_u64() >> 16);
    let text = format!(
        "store = \"{url}\"\nstore_table = \"{table}\"\nforward_journal_file = \"{}\"\n",
        journal.display()
    );
    std::fs::write(&file, text).unwrap();
    let up = upstream().await;
    let gateway = spawn_binary(&up.base, &file).await;
    let k = key();
    let resp = post(&gateway.base, "/payments", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    assert!(journal.is_file(), "serve opened the journal");

    // Each opens the store as the gateway does, without the journal the gateway holds.
    for args in [
        &["migrate"][..],
        &["stats"],
        &["inspect", "--key", &k],
        &["purge"],
    ] {
        let out = idemgate(&file, args).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
    }
    let path = file.to_str().unwrap().to_owned();
    let check = [
        "config".to_owned(),
        "check".into(),
        path,
        "--connect".into(),
    ];
    let (code, text) = tokio::task::spawn_blocking(move || run_idemgate(&check))
        .await
        .unwrap();
    assert_eq!(code, 0, "{text}");

    // The file is locked: a second gateway on it does not start, and says which file.
    let second = tokio::task::spawn_blocking({
        let file = file.clone();
        move || serve_until_exit(&file)
    });
    let out = second.await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&journal.display().to_string()) && stderr.contains("in use"),
        "{stderr}"
    );

    // The first gateway still answers, from its record.
    let replay = post(&gateway.base, "/payments", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(up.count(), 1);
    drop(gateway);
    drop_pg_table(&url, &table).await;
}
