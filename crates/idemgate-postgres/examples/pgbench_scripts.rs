//! Writes pgbench scripts that run the PostgreSQL store's exact statements (for
//! `scripts/bench/postgres_side_by_side.sh`), not a test.
//!
//! ```text
//! cargo run --release -p idemgate-postgres --example pgbench_scripts -- TABLE DIR
//! ```
//!
//! It opens the store on `TABLE` (migrated, created if missing) with one connection, runs a
//! fresh key (`insert_or_get` + `complete`) and its replay (`insert_or_get` again) through
//! it, reads the SQL text the store prepared back from `pg_prepared_statements`, and writes:
//! - `DIR/fresh.sql`: the insert of a new key, then its outcome write (two commits), with
//!   the parameters a gateway sends (a 32-byte fingerprint, a 30 s lease, a 24 h TTL, a
//!   `201` with two headers and a 65-byte JSON body);
//! - `DIR/replay.sql`: the same insert statement on the key stored above (the one round
//!   trip of a replay: the record is found in the statement's snapshot, nothing written);
//! - `DIR/read.sql`: the read inside that statement alone (`SELECT` of the record's columns by
//!   its primary key), the least any replay can cost.
//!
//! `$N` placeholders become pgbench variables, so `pgbench -M prepared` sends the same
//! statement text with parameters. The key is `'pgb-' || :client_id || '-' || :r`, a string
//! expression in place of `$3`. The URL comes from `IDEMGATE_BENCH_DATABASE_URL`, else
//! `IDEMGATE_TEST_DATABASE_URL`, else `postgres://postgres@127.0.0.1:5432/test`. The table is
//! left for the caller to use and drop.

use bytes::Bytes;
use idemgate_core::fingerprint::{Fingerprint, CURRENT_VERSION};
use idemgate_core::{
    IdempotencyKey, IdempotencyStore, InsertOutcome, InsertRequest, LeaseToken, ScopedKey,
    StoredResponse,
};
use idemgate_postgres::PostgresStore;
use std::time::Duration;

/// The principal, route and key of the record the replay script reads.
const PRINCIPAL: &str = "anonymous";
const ROUTE: &str = "POST /v1/payments";
const REPLAY_KEY: &str = "pgbench-replay-0001";

fn response() -> StoredResponse {
    StoredResponse {
        status: 201,
        headers: vec![
            (
                "content-type".into(),
                Bytes::from_static(b"application/json"),
            ),
            (
                "x-upstream-id".into(),
                Bytes::from_static(b"0123456789abcdef"),
            ),
        ],
        body: Bytes::from_static(
            br#"{"id":"0123456789abcdef0123456789abcdef","status":"created"}"#,
        ),
        replayable: true,
        sealed_by: None,
    }
}

fn request(key: &str) -> InsertRequest {
    InsertRequest {
        key: ScopedKey {
            principal: PRINCIPAL.into(),
            route: ROUTE.into(),
            key: IdempotencyKey::new(key).expect("valid key"),
        },
        fingerprint: Fingerprint {
            version: CURRENT_VERSION,
            digest: [7; 32],
        },
        token: LeaseToken::random(),
        lease_ttl: Duration::from_secs(30),
        record_ttl: Duration::from_secs(86_400),
    }
}

/// `text` with each `$N` (highest first, so `$10` is not read as `$1`) replaced by `params[N-1]`.
///
/// # Panics
/// When a `$N` is left over: the statement gained a parameter this example does not bind.
fn bind(text: &str, params: &[String]) -> String {
    let mut out = text.to_owned();
    for (i, value) in params.iter().enumerate().rev() {
        out = out.replace(&format!("${}", i + 1), value);
    }
    let unbound = out
        .split('$')
        .skip(1)
        .any(|rest| rest.starts_with(|c: char| c.is_ascii_digit()));
    assert!(
        !unbound,
        "a parameter is left unbound ({} given): {out}",
        params.len()
    );
    out
}

fn hex(bytes: &[u8]) -> String {
    let digits: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("'\\x{digits}'::bytea")
}

fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(table), Some(dir)) = (args.next(), args.next()) else {
        eprintln!("usage: pgbench_scripts TABLE DIR");
        std::process::exit(2);
    };
    let url = std::env::var("IDEMGATE_BENCH_DATABASE_URL")
        .or_else(|_| std::env::var("IDEMGATE_TEST_DATABASE_URL"))
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let pool = PostgresStore::pool_options()
        .max_connections(1)
        .connect(&url)
        .await
        .expect("connect");
    let store = PostgresStore::from_pool(pool.clone())
        .with_table_name(&table)
        .expect("table name");
    store.migrate().await.expect("migrate");
    let req = request(REPLAY_KEY);
    let InsertOutcome::Inserted(lease) = store.insert_or_get(&req).await.expect("insert") else {
        panic!("{REPLAY_KEY} exists in {table}: use a new table");
    };
    store.complete(&lease, &response()).await.expect("complete");
    let replay = store.insert_or_get(&req).await.expect("replay");
    assert!(matches!(replay, InsertOutcome::Existing { .. }), "replayed");

    let statements: Vec<String> =
        sqlx::query_scalar("SELECT statement FROM pg_prepared_statements")
            .fetch_all(&pool)
            .await
            .expect("pg_prepared_statements");
    let find = |needle: &str| {
        statements
            .iter()
            .find(|s| s.contains(needle))
            .unwrap_or_else(|| panic!("no prepared statement with {needle}"))
            .clone()
    };
    let insert = find("ON CONFLICT");
    let complete = find("state = 'completed'");

    let digest = hex(&req.fingerprint.digest);
    let insert_params = |key: String| {
        [
            quote(PRINCIPAL),
            quote(ROUTE),
            key,
            digest.clone(),
            i32::from(CURRENT_VERSION).to_string(),
            ":token".into(),
            "30000".into(),
            "86400000".into(),
        ]
        .map(|p| p.to_string())
    };
    let key = "('pgb-' || :client_id || '-' || :r)".to_owned();
    let response = response();
    // The checksum is the store's per record; a constant of its size costs the same.
    let complete_params = [
        quote(PRINCIPAL),
        quote(ROUTE),
        key.clone(),
        "1".into(),
        ":token".into(),
        "201".into(),
        hex(&response.encode_headers()),
        hex(&response.body),
        "true".into(),
        hex(&[9; 32]),
        // The encryption key's id: none without encryption at rest.
        "NULL".into(),
    ];
    let vars = "\\set r random(1, 2000000000)\n\\set token random(1, 9000000000000000000)\n";
    let fresh = format!(
        "{vars}{};\n{};\n",
        bind(&insert, &insert_params(key)),
        bind(&complete, &complete_params)
    );
    let replay = format!(
        "{vars}{};\n",
        bind(&insert, &insert_params(quote(REPLAY_KEY)))
    );
    let read = insert
        .strip_prefix("WITH found AS (")
        .and_then(|rest| rest.split_once("), ins AS"))
        .expect("the insert statement starts with its read")
        .0;
    let read = format!("{};\n", bind(read, &insert_params(quote(REPLAY_KEY))));
    std::fs::write(format!("{dir}/read.sql"), read).expect("write read.sql");
    std::fs::write(format!("{dir}/fresh.sql"), fresh).expect("write fresh.sql");
    std::fs::write(format!("{dir}/replay.sql"), replay).expect("write replay.sql");
    println!("{dir}/fresh.sql {dir}/replay.sql {dir}/read.sql");
}
