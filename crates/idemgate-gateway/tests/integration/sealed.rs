//! `encryption_key_files`: stored responses sealed at rest. The store (its file and WAL, a
//! `pg_dump` of its table, its Redis values) never holds a response's bytes in clear; the
//! retry replays them byte for byte; rotation opens old records with the old key; a record
//! sealed with a key no longer configured, or a sealed response moved to another record,
//! answers `500 record-corrupt` and is never run again.

use std::path::{Path, PathBuf};

use idemgate_core::{response_checksum, IdempotencyKey, ScopedKey, StoredResponse};

use crate::support::*;

/// Writes a key file of 64 hex digits (`seed` repeated, with a counter so no byte repeats).
fn key_file(dir: &Path, name: &str, seed: u8) -> PathBuf {
    let hex: String = (0..32u8)
        .map(|i| format!("{:02x}", seed.wrapping_add(i)))
        .collect();
    let path = dir.join(name);
    std::fs::write(&path, format!("{hex}\n")).unwrap();
    path
}

fn keys(c: &mut idemgate_gateway::config::Config, files: &[&Path]) {
    c.encryption_key_files = files.iter().map(|f| f.display().to_string()).collect();
}

fn marker() -> String {
    format!("SEALED-MARKER-{:016x}", rand_u64())
}

/// A first request whose answer holds a fresh marker, and its retry: byte for byte the same
/// body. Returns the key, the request body and the marker.
async fn first_and_replay(base: &str) -> (String, String, String) {
    let (k, secret) = (key(), marker());
    let body = format!("{{\"card\":\"{secret}\"}}");
    let first = post(base, "/payments", Some(&k), &body)
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 201);
    let first = first.bytes().await.unwrap();
    assert!(first.windows(secret.len()).any(|w| w == secret.as_bytes()));
    let retry = post(base, "/payments", Some(&k), &body)
        .send()
        .await
        .unwrap();
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.headers()["location"], "/payments/pay_1");
    assert_eq!(
        retry.bytes().await.unwrap(),
        first,
        "replayed byte for byte"
    );
    (k, body, secret)
}

/// Whether `bytes` hold `secret`, as it is or hex-encoded (`pg_dump` writes a `bytea` in hex).
fn holds(bytes: &[u8], secret: &str) -> bool {
    let hex = hex::encode(secret);
    [secret.as_bytes(), hex.as_bytes()]
        .iter()
        .any(|s| bytes.windows(s.len()).any(|w| w == *s))
}

fn dir_bytes(dir: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for file in std::fs::read_dir(dir).unwrap() {
        let file = file.unwrap().path();
        if file.extension().is_none_or(|e| e != "key") {
            all.extend(std::fs::read(&file).unwrap());
        }
    }
    all
}

#[tokio::test]
async fn the_sqlite_file_and_wal_hold_no_response_in_clear() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("idemgate.db").display());
    let file = key_file(dir.path(), "a.key", 1);
    let gw = gateway(&up.base, &store, |c| keys(c, &[&file])).await;
    let (_, _, secret) = first_and_replay(&gw.base).await;
    assert!(
        !holds(&dir_bytes(dir.path()), &secret),
        "the store holds it"
    );
    gw.stop().await;
    // The check can fail: without keys the store holds the response.
    let gw = gateway(&up.base, &store, |_| {}).await;
    let (_, _, clear) = first_and_replay(&gw.base).await;
    assert!(holds(&dir_bytes(dir.path()), &clear));
    assert_eq!(up.count(), 2);
}

#[tokio::test]
async fn rotation_replays_old_records_until_their_key_is_removed() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("idemgate.db").display());
    let (old, new) = (
        key_file(dir.path(), "old.key", 1),
        key_file(dir.path(), "new.key", 99),
    );
    let gw = gateway(&up.base, &store, |c| keys(c, &[&old])).await;
    let (k, body, _) = first_and_replay(&gw.base).await;
    gw.stop().await;
    let gw = gateway(&up.base, &store, |c| keys(c, &[&new, &old])).await;
    let retry = post(&gw.base, "/payments", Some(&k), &body)
        .send()
        .await
        .unwrap();
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    let (k2, body2, _) = first_and_replay(&gw.base).await;
    gw.stop().await;
    operator_sees_both_keys(dir.path(), &store, (&old, &new), &k2).await;
    let gw = gateway(&up.base, &store, |c| keys(c, &[&new])).await;
    let retry = post(&gw.base, "/payments", Some(&k2), &body2)
        .send()
        .await
        .unwrap();
    assert_eq!(
        retry.headers()["idempotent-replayed"],
        "true",
        "sealed with the new key"
    );
    for _ in 0..2 {
        let gone = post(&gw.base, "/payments", Some(&k), &body)
            .send()
            .await
            .unwrap();
        assert_problem(gone, 500, "record-corrupt").await;
    }
    gw.stop().await;
    let gw = gateway(&up.base, &store, |_| {}).await;
    let unkeyed = post(&gw.base, "/payments", Some(&k2), &body2)
        .send()
        .await
        .unwrap();
    assert_problem(unkeyed, 500, "record-corrupt").await;
    assert_eq!(up.count(), 2, "nothing ran again");
}

/// `idemgate stats` counts one record per key id; `inspect --show-body` opens a sealed body
/// with the configuration's keys, and says it is sealed without them.
async fn operator_sees_both_keys(dir: &Path, store: &str, (old, new): (&Path, &Path), k: &str) {
    let id = |f: &Path| {
        let key = idemgate_core::seal::parse_key(&std::fs::read(f).unwrap()).unwrap();
        idemgate_core::seal::key_id(&key).to_string()
    };
    let config = dir.join("ops.toml");
    let files = format!("[\"{}\", \"{}\"]", new.display(), old.display());
    std::fs::write(
        &config,
        format!("store = \"{store}\"\nencryption_key_files = {files}\n"),
    )
    .unwrap();
    let text = crate::admin::idemgate(&config, &["stats"]).await;
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    for key in [old, new] {
        let line = format!("sealed {}", id(key));
        let count = text
            .lines()
            .find_map(|l| l.strip_prefix(&line))
            .unwrap_or("");
        assert_eq!(count.trim(), "1", "{text}");
        assert!(
            count.starts_with(' '),
            "the count is apart from the id: {text}"
        );
    }
    let stats = crate::admin::json(&config, &["stats"]).await;
    assert_eq!(stats["sealed_by_key_id"][id(old)], 1, "{stats}");
    assert_eq!(stats["sealed_by_key_id"][id(new)], 1, "{stats}");
    let shown = crate::admin::json(&config, &["inspect", "--key", k, "--show-body"]).await;
    let record = &shown["records"][0];
    assert_eq!(record["sealed_by"], id(new).as_str());
    assert!(
        record["body"].as_str().unwrap().contains("SEALED-MARKER-"),
        "{record}"
    );
    std::fs::write(&config, format!("store = \"{store}\"\n")).unwrap();
    let shown = crate::admin::json(&config, &["inspect", "--key", k, "--show-body"]).await;
    let body = shown["records"][0]["body"].as_str().unwrap().to_owned();
    assert_eq!(body, format!("sealed, key id {}", id(new)));
}

/// The row of `key` as (principal, route, status, body, replayable, key id).
type Row = (String, String, i64, Vec<u8>, bool, String);

fn row(conn: &rusqlite::Connection, key: &str) -> Row {
    conn.query_row(
        "SELECT principal, route, status, response_body, replayable, response_key_id \
         FROM idempotency_records WHERE key = ?1",
        [key],
        |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        },
    )
    .unwrap()
}

#[tokio::test]
async fn a_sealed_response_moved_to_another_record_is_corrupt() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemgate.db");
    let file = key_file(dir.path(), "a.key", 7);
    let gw = gateway(&up.base, &format!("sqlite://{}", path.display()), |c| {
        keys(c, &[&file])
    })
    .await;
    let (from, _, _) = first_and_replay(&gw.base).await;
    let (to, to_body, _) = first_and_replay(&gw.base).await;
    // Move `from`'s sealed response to `to`, with the checksum an attacker can compute (it
    // is unkeyed): only the sealing's associated data tells the records apart.
    let conn = rusqlite::Connection::open(&path).unwrap();
    let (_, _, status, body, replayable, id) = row(&conn, &from);
    let (principal, route, ..) = row(&conn, &to);
    let moved = StoredResponse {
        status: status as u16,
        headers: Vec::new(),
        body: body.clone().into(),
        replayable,
        sealed_by: Some(id.parse().unwrap()),
    };
    let scope = ScopedKey {
        principal,
        route,
        key: IdempotencyKey::new(&to).unwrap(),
    };
    let sum = response_checksum(&scope, &moved);
    let n = conn
        .execute(
            "UPDATE idempotency_records SET response_body = ?1, response_checksum = ?2 \
             WHERE key = ?3",
            rusqlite::params![body, &sum[..], to],
        )
        .unwrap();
    assert_eq!(n, 1);
    let retry = post(&gw.base, "/payments", Some(&to), &to_body)
        .send()
        .await
        .unwrap();
    assert_problem(retry, 500, "record-corrupt").await;
    assert_eq!(up.count(), 2, "not run again");
    // The operator sees it as the gateways answer it.
    let config = dir.path().join("ops.toml");
    let text = format!(
        "store = \"sqlite://{}\"\nencryption_key_files = [\"{}\"]\n",
        path.display(),
        file.display()
    );
    std::fs::write(&config, text).unwrap();
    let shown = crate::admin::json(&config, &["inspect", "--key", &to, "--show-body"]).await;
    assert_eq!(shown["records"][0]["condition"], "corrupt", "{shown}");
}

#[tokio::test]
async fn a_key_file_that_is_not_a_key_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.key");
    std::fs::write(&bad, "not-a-key-but-a-secret").unwrap();
    let config = idemgate_gateway::config::Config {
        upstream: "http://127.0.0.1:9".into(),
        store: "memory://".into(),
        encryption_key_files: vec![bad.display().to_string(), "/nonexistent/k.key".into()],
        ..Default::default()
    };
    let err = idemgate_gateway::cli::validated(config)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("encryption_key_files") && err.contains("bad.key"),
        "{err}"
    );
    assert!(
        !err.contains("not-a-key"),
        "the file's bytes are never shown: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_dump_holds_no_response_in_clear() {
    let Some(url) = test_url("IDEMGATE_TEST_DATABASE_URL") else {
        return;
    };
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let file = key_file(dir.path(), "a.key", 3);
    let table = format!("idem_sealed_{:012x}", rand_u64() >> 16);
    // The forward journal holds what the store holds; the check finds a response in clear.
    let (clear_dir, sealed_dir) = (dir.path().join("clear"), dir.path().join("sealed"));
    let mut secrets = Vec::new();
    for (journal, sealed) in [(&clear_dir, false), (&sealed_dir, true)] {
        std::fs::create_dir(journal).unwrap();
        let gw = gateway(&up.base, &url, |c| {
            c.store_table = table.clone();
            c.forward_journal_file = journal.join("journal.db").display().to_string();
            if sealed {
                keys(c, &[&file]);
            }
        })
        .await;
        secrets.push(first_and_replay(&gw.base).await.2);
        gw.stop().await;
    }
    assert!(
        holds(&dir_bytes(&clear_dir), &secrets[0]),
        "the check can fail"
    );
    let secret = secrets.pop().unwrap();
    assert!(
        !holds(&dir_bytes(&sealed_dir), &secret),
        "the journal holds it"
    );
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
    assert!(dump.stdout.len() > 100, "the dump holds the record");
    assert!(holds(&dump.stdout, &secrets[0]), "the check can fail");
    assert!(!holds(&dump.stdout, &secret), "pg_dump holds it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_values_hold_no_response_in_clear() {
    let Some(url) = test_url("IDEMGATE_TEST_REDIS_URL") else {
        return;
    };
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let file = key_file(dir.path(), "a.key", 5);
    let prefix = format!("idem-sealed-{:012x}:", rand_u64() >> 16);
    let gw = gateway(&up.base, &url, |c| {
        c.store_key_prefix = prefix.clone();
        keys(c, &[&file]);
    })
    .await;
    let (_, _, secret) = first_and_replay(&gw.base).await;
    let values = redis_values(&url, &prefix).await;
    gw.stop().await;
    // The check can fail: without keys the values hold the response.
    let gw = gateway(&up.base, &url, |c| c.store_key_prefix = prefix.clone()).await;
    let (_, _, clear) = first_and_replay(&gw.base).await;
    let control = redis_values(&url, &prefix).await;
    delete_redis_prefix(&url, &prefix).await;
    assert!(values.len() > 100, "the record is read");
    assert!(holds(&control, &clear), "the check can fail");
    assert!(!holds(&values, &secret), "a Redis value holds it");
}

/// A key service with keys: a retried acquire of one attempt gets its own lease back (the
/// stored fingerprint is keyed), `/v1/complete` stores the response sealed, and the next
/// acquire replays it in clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_service_seals_what_it_completes() {
    use crate::support::key_service::{config_text, free_addr, start, wait_for, TOKEN_A};
    let dir = tempfile::tempdir().unwrap();
    let file = key_file(dir.path(), "ks.key", 11);
    let db = dir.path().join("ks.db");
    let addr = free_addr();
    let extra = format!("encryption_key_files = [\"{}\"]", file.display());
    let config = dir.path().join("ks.toml");
    let store = format!("sqlite://{}", db.display());
    std::fs::write(&config, config_text(&store, &addr, &extra)).unwrap();
    let mut child = start(&config);
    wait_for(&addr).await;
    let call = |path: &str, body: serde_json::Value| {
        let url = format!("http://{addr}{path}");
        async move {
            let resp = client().post(url).bearer_auth(TOKEN_A).json(&body).send();
            let resp = resp.await.unwrap();
            assert_eq!(resp.status(), 200);
            resp.json::<serde_json::Value>().await.unwrap()
        }
    };
    let ident = serde_json::json!({"scope": "POST /p", "principal": "u", "key": key()});
    let mut ask = ident.clone();
    ask["fingerprint"] = "amount=1000".into();
    ask["attempt"] = format!("attempt-{}", rand_u64()).into();
    let first = call("/v1/acquire", ask.clone()).await;
    let again = call("/v1/acquire", ask.clone()).await;
    assert_eq!(
        (&first["decision"], &again["decision"]),
        (&"run".into(), &"run".into())
    );
    let secret = marker();
    let mut done = ident.clone();
    done["lease"] = first["lease"].clone();
    done["response"] = serde_json::json!({"status": 201, "headers": [],
        "body_base64": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &secret)});
    call("/v1/complete", done).await;
    ask["attempt"] = format!("attempt-{}", rand_u64()).into();
    let replay = call("/v1/acquire", ask).await;
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(replay["decision"], "replay", "{replay}");
    let body = replay["response"]["body_base64"]
        .as_str()
        .unwrap()
        .to_owned();
    let body = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, body).unwrap();
    assert_eq!(body, secret.as_bytes());
    let mut stored = Vec::new();
    for f in std::fs::read_dir(dir.path()).unwrap().flatten() {
        if f.path().to_string_lossy().contains("ks.db") {
            stored.extend(std::fs::read(f.path()).unwrap());
        }
    }
    assert!(
        stored.len() > 1000 && !holds(&stored, &secret),
        "the key service's store holds it"
    );
}
