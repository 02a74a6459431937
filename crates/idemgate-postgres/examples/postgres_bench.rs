//! Benchmark (not a test): insert + complete operations per second of [`PostgresStore`] at
//! a given concurrency, against the same two SQL statements run raw through sqlx at the
//! same concurrency on the same pool (the physical limit), and the ratio. DESIGN.md target:
//! at least 0.70.
//!
//! ```text
//! cargo run --release -p idemgate-postgres --example postgres_bench -- [--concurrency 16] [--seconds 5]
//!     [--rounds 2] [--synchronous-commit off] [--journal PATH]
//! ```
//!
//! `--journal PATH` runs the store with a forward journal there (one local fsync'd write per
//! insert and per complete; `PostgresOptions::with_forward_journal`): its cost is the ratio
//! against the same run without it.
//!
//! The database URL comes from `IDEMGATE_BENCH_DATABASE_URL`, else
//! `IDEMGATE_TEST_DATABASE_URL`, else `postgres://postgres@127.0.0.1:5432/test`. The run
//! uses a table of its own (`idem_bench_<random>`), emptied before each phase and dropped at
//! the end. Phases alternate (raw, store, raw, store, ...) so drift hits both alike. The raw
//! phase runs the exact SQL text the store prepared (read back from
//! `pg_prepared_statements`), with the same parameters.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use idemgate_core::fingerprint::{Fingerprint, CURRENT_VERSION};
use idemgate_core::{
    response_checksum, IdempotencyKey, IdempotencyStore, InsertOutcome, InsertRequest, LeaseToken,
    ScopedKey, StoredResponse,
};
use idemgate_postgres::{ForwardJournalOptions, PostgresOptions, PostgresStore};
use sqlx::{PgPool, Row};
use tokio::time::Instant;

const PRINCIPAL: &str = "bench-principal";
const ROUTE: &str = "POST /payments";
const LEASE: Duration = Duration::from_secs(10);
const TTL: Duration = Duration::from_secs(86_400);

struct Args {
    concurrency: usize,
    seconds: f64,
    rounds: usize,
    /// `off` takes the WAL flush out of each commit, so CPU (the store's overhead) shows more.
    synchronous_commit: Option<String>,
    /// A forward journal file for the store.
    journal: Option<String>,
}

fn args() -> Args {
    let mut out = Args {
        concurrency: 16,
        seconds: 5.0,
        rounds: 2,
        synchronous_commit: None,
        journal: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_default();
        match flag.as_str() {
            "--concurrency" => out.concurrency = value.parse().expect("--concurrency N"),
            "--seconds" => out.seconds = value.parse().expect("--seconds S"),
            "--rounds" => out.rounds = value.parse().expect("--rounds N"),
            "--synchronous-commit" => out.synchronous_commit = Some(value),
            "--journal" => out.journal = Some(value),
            other => panic!(
                "unknown flag {other}; use --concurrency, --seconds, --rounds, --synchronous-commit"
            ),
        }
    }
    out
}

fn stored_response() -> StoredResponse {
    StoredResponse {
        status: 201,
        headers: vec![
            (
                "content-type".into(),
                Bytes::from_static(b"application/json"),
            ),
            ("location".into(), Bytes::from_static(b"/payments/pay_123")),
        ],
        body: Bytes::from(format!(
            r#"{{"id":"pay_123","amount":1000,"currency":"EUR","note":"{}"}}"#,
            "x".repeat(140)
        )),
        replayable: true,
        sealed_by: None,
    }
}

fn fingerprint() -> Fingerprint {
    Fingerprint {
        version: CURRENT_VERSION,
        digest: [7; 32],
    }
}

/// The SQL text of the store's insert and complete statements, as prepared on a connection.
async fn prepared_sql(pool: &PgPool) -> (String, String) {
    let statements: Vec<String> =
        sqlx::query_scalar("SELECT statement FROM pg_prepared_statements")
            .fetch_all(pool)
            .await
            .unwrap();
    let find = |prefix: &str, needle: &str| {
        statements
            .iter()
            .find(|s| s.starts_with(prefix) && s.contains(needle))
            .cloned()
            .unwrap_or_else(|| panic!("no prepared statement like {prefix}..{needle}"))
    };
    (
        find("WITH found AS (SELECT", "ON CONFLICT"),
        find("UPDATE", "state = 'completed'"),
    )
}

fn scoped(key: &str) -> ScopedKey {
    ScopedKey {
        principal: PRINCIPAL.into(),
        route: ROUTE.into(),
        key: IdempotencyKey::new(key).unwrap(),
    }
}

/// One insert + complete through the store.
async fn store_op(store: &PostgresStore, key: String, response: &StoredResponse) {
    let req = InsertRequest {
        key: scoped(&key),
        fingerprint: fingerprint(),
        token: LeaseToken::random(),
        lease_ttl: LEASE,
        record_ttl: TTL,
    };
    match store.insert_or_get(&req).await.unwrap() {
        InsertOutcome::Inserted(lease) => store.complete(&lease, response).await.unwrap(),
        InsertOutcome::Existing { record, .. } => panic!("fresh key exists: {record:?}"),
    }
}

/// The same two statements with the same parameters, straight through sqlx (the response
/// checksum computed per key, as the store does).
struct Raw {
    insert: String,
    complete: String,
    digest: Vec<u8>,
    response: StoredResponse,
    headers: Vec<u8>,
}

impl Raw {
    async fn op(&self, pool: &PgPool, key: String) {
        let token: i64 = rand::random();
        let row = sqlx::query(&self.insert)
            .bind(PRINCIPAL)
            .bind(ROUTE)
            .bind(key.as_str())
            .bind(self.digest.as_slice())
            .bind(i32::from(CURRENT_VERSION))
            .bind(token)
            .bind(LEASE.as_millis() as i64)
            .bind(TTL.as_millis() as i64)
            .fetch_optional(pool)
            .await
            .unwrap()
            .expect("fresh key inserted");
        assert!(row.get::<bool, _>(0), "fresh key inserted");
        let fence: i64 = row.get(4);
        let checksum = response_checksum(&scoped(&key), &self.response);
        let done = sqlx::query(&self.complete)
            .bind(PRINCIPAL)
            .bind(ROUTE)
            .bind(key.as_str())
            .bind(fence)
            .bind(token)
            .bind(201_i32)
            .bind(self.headers.as_slice())
            .bind(self.response.body.as_ref())
            .bind(true)
            .bind(checksum.as_slice())
            .execute(pool)
            .await
            .unwrap();
        assert_eq!(done.rows_affected(), 1);
    }
}

#[derive(Clone, Copy)]
enum Mode {
    Raw,
    Store,
}

/// Runs `concurrency` loops of insert + complete for `seconds`; returns operations/s.
async fn phase(mode: Mode, args: &Args, store: &PostgresStore, raw: &Arc<Raw>, label: &str) -> f64 {
    sqlx::raw_sql(&format!("TRUNCATE \"{}\"", store.table_name()))
        .execute(store.pool())
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let began = Instant::now();
    let tasks: Vec<_> = (0..args.concurrency)
        .map(|task| {
            let (store, raw, stop) = (store.clone(), raw.clone(), stop.clone());
            let label = label.to_owned();
            tokio::spawn(async move {
                let response = stored_response();
                let mut n: u64 = 0;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("{label}-{task:03}-{n:010}");
                    match mode {
                        Mode::Raw => raw.op(store.pool(), key).await,
                        Mode::Store => store_op(&store, key, &response).await,
                    }
                    n += 1;
                }
                n
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(args.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut ops = 0;
    for task in tasks {
        ops += task.await.unwrap();
    }
    let rate = ops as f64 / began.elapsed().as_secs_f64();
    println!(
        "{label:>12}: {ops:>7} insert+complete in {:.2?} = {rate:>8.0} ops/s",
        began.elapsed()
    );
    rate
}

#[tokio::main]
async fn main() {
    let args = args();
    let url = std::env::var("IDEMGATE_BENCH_DATABASE_URL")
        .or_else(|_| std::env::var("IDEMGATE_TEST_DATABASE_URL"))
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let mut options = PostgresOptions::new()
        .connect_options(&url)
        .expect("database URL");
    if let Some(mode) = &args.synchronous_commit {
        options = options.options([("synchronous_commit", mode.as_str())]);
    }
    let table = format!("idem_bench_{:08x}", rand::random::<u32>());
    let store = match &args.journal {
        None => PostgresStore::from_pool(
            PostgresStore::pool_options()
                .max_connections(args.concurrency as u32)
                .connect_with(options)
                .await
                .expect("connect"),
        ),
        Some(path) => {
            let mut url = url.clone();
            if let Some(mode) = &args.synchronous_commit {
                let sep = if url.contains('?') { '&' } else { '?' };
                url = format!("{url}{sep}options=-c%20synchronous_commit%3D{mode}");
            }
            let journal = ForwardJournalOptions::new(path);
            let options = PostgresOptions::new()
                .with_max_connections(args.concurrency as u32)
                .with_forward_journal(Some(journal));
            PostgresStore::connect_with(&url, &options)
                .await
                .expect("connect with a journal")
        }
    }
    .with_table_name(&table)
    .unwrap();
    let pool = store.pool().clone();
    store.migrate().await.expect("migrate");
    println!(
        "idemgate-postgres bench: concurrency {}, {} s per phase, {} rounds, \
         synchronous_commit {}, table {table}",
        args.concurrency,
        args.seconds,
        args.rounds,
        args.synchronous_commit
            .as_deref()
            .unwrap_or("(server default)")
    );

    // Warm-up: opens every connection and prepares the store's statements on each.
    let warm = Args {
        seconds: 1.0,
        synchronous_commit: None,
        journal: None,
        ..args
    };
    let (insert, complete) = {
        let placeholder = Arc::new(Raw {
            insert: String::new(),
            complete: String::new(),
            digest: Vec::new(),
            response: stored_response(),
            headers: Vec::new(),
        });
        phase(Mode::Store, &warm, &store, &placeholder, "warm-up").await;
        prepared_sql(&pool).await
    };
    let response = stored_response();
    let raw = Arc::new(Raw {
        insert,
        complete,
        digest: fingerprint().digest.to_vec(),
        headers: response.encode_headers(),
        response,
    });

    let (mut raw_total, mut store_total, mut ratios) = (0.0, 0.0, Vec::new());
    for round in 1..=args.rounds {
        let raw_rate = phase(Mode::Raw, &args, &store, &raw, &format!("raw-{round}")).await;
        let store_rate = phase(Mode::Store, &args, &store, &raw, &format!("store-{round}")).await;
        raw_total += raw_rate;
        store_total += store_rate;
        ratios.push(store_rate / raw_rate);
    }
    ratios.sort_by(f64::total_cmp);
    let (raw_rate, store_rate) = (
        raw_total / args.rounds as f64,
        store_total / args.rounds as f64,
    );
    println!("raw sqlx (same SQL): {raw_rate:>8.0} ops/s (mean of rounds)");
    println!("PostgresStore:       {store_rate:>8.0} ops/s (mean of rounds)");
    println!(
        "ratio store/raw:     {:.2} of the means, {:.2} median of rounds (target >= 0.70)",
        store_rate / raw_rate,
        ratios[ratios.len() / 2]
    );

    sqlx::raw_sql(&format!(
        "DROP TABLE \"{table}\"; DROP TABLE \"{table}_migrations\"; \
         DROP TABLE IF EXISTS \"{table}_failovers\""
    ))
    .execute(&pool)
    .await
    .expect("drop bench table");
}
