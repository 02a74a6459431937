//! The forward journal end to end: two `idemgate serve` processes, A and B, each with its own
//! `forward_journal_file` and `failover_grace = "3s"`, on an asynchronous primary and standby
//! (one multi-host store URL, which follows the promotion as a virtual IP would). Keys are
//! completed while the standby takes nothing; the primary is killed, what the standby had
//! not written is lost, the standby is promoted. Every retry, sent first to the gateway that
//! holds no journal entry for its key, replays the first answer, and no key runs twice.
//!
//! `IDEMGATE_FAILOVER_ROUNDS` failovers (default 2), one cluster each;
//! `scripts/soak/failover.sh` runs 50. A failed round keeps the gateways' configurations,
//! journals and logs and the servers' logs, and prints where.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use futures_util::future::join_all;
use tokio::time::Instant;

use crate::replication::{table, Cluster};
use crate::support::{key, post, Process};

/// Keys completed through each gateway while the standby streams.
const HEALTHY: usize = 3;
/// Keys completed through A, then through B, while the standby's WAL receiver is stopped.
const LAGGED: [usize; 2] = [20, 10];
/// The gateways' names, in the order of their index.
const NAMES: [&str; 2] = ["A", "B"];
/// The longest wait a `503`'s `Retry-After` gets.
const MAX_WAIT: Duration = Duration::from_millis(200);
/// How long a key may keep getting `503` before the round fails as hung.
const HUNG: Duration = Duration::from_secs(60);

/// An upstream that counts executions per key (the `key` field of the JSON body); each
/// execution answers `201` with an execution number no other execution got.
#[derive(Clone, Default)]
struct KeyedUpstream {
    base: String,
    runs: Arc<Mutex<HashMap<String, u32>>>,
    next: Arc<AtomicU64>,
}

impl KeyedUpstream {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let up = Self {
            base: format!("http://{}", listener.local_addr().unwrap()),
            ..Self::default()
        };
        let app = axum::Router::new().fallback(execute).with_state(up.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        up
    }

    /// How many times `key` was executed.
    fn runs(&self, key: &str) -> u32 {
        self.runs.lock().unwrap().get(key).copied().unwrap_or(0)
    }

    /// How many keys were executed more than once.
    fn doubles(&self) -> usize {
        let runs = self.runs.lock().unwrap();
        runs.values().filter(|n| **n > 1).count()
    }
}

async fn execute(State(up): State<KeyedUpstream>, body: Bytes) -> impl IntoResponse {
    let key = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["key"].as_str().map(str::to_owned))
        .unwrap_or_default();
    *up.runs.lock().unwrap().entry(key.clone()).or_default() += 1;
    let execution = up.next.fetch_add(1, Ordering::SeqCst) + 1;
    let body = serde_json::json!({ "execution": execution, "key": key }).to_string();
    (
        StatusCode::CREATED,
        [("content-type", "application/json")],
        body,
    )
}

/// The request body of `key`.
fn body(key: &str) -> String {
    format!("{{\"key\":\"{key}\"}}")
}

/// A final answer (not `503`) and how many `503`s came first.
struct Answer {
    status: u16,
    replayed: bool,
    body: String,
    refusals: u32,
}

/// POSTs `key` to `base` until the answer is not `503`, waiting as `Retry-After` says (at most
/// [`MAX_WAIT`]); panics when it still is after [`HUNG`].
async fn final_answer(base: &str, key: &str) -> Answer {
    let started = Instant::now();
    let mut refusals = 0;
    loop {
        let resp = post(base, "/payments", Some(key), &body(key))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{key} at {base}: {e}"));
        let status = resp.status().as_u16();
        if status != 503 {
            let replayed = resp.headers().get("idempotent-replayed");
            let replayed = replayed.is_some_and(|v| v == "true");
            let body = resp.text().await.unwrap();
            return Answer {
                status,
                replayed,
                body,
                refusals,
            };
        }
        refusals += 1;
        assert!(
            started.elapsed() < HUNG,
            "{key} at {base}: still 503 after {refusals} tries"
        );
        let retry_after = resp.headers().get("retry-after");
        let secs = retry_after.and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        let wait = secs.map_or(MAX_WAIT, |s| Duration::from_secs(s).min(MAX_WAIT));
        tokio::time::sleep(wait.max(Duration::from_millis(10))).await;
    }
}

/// A key, the gateway that answered it first, and that first answer's body.
struct Sent {
    key: String,
    via: usize,
    first: String,
}

/// Sends `n` fresh keys through gateway `via`, one after the other; their first answers.
async fn first_answers(gws: &[Process; 2], via: usize, n: usize) -> Vec<Sent> {
    let mut sent = Vec::new();
    for _ in 0..n {
        let key = key();
        let answer = final_answer(&gws[via].base, &key).await;
        assert_eq!(
            (answer.status, answer.replayed),
            (201, false),
            "{key}, first through {}: {}",
            NAMES[via],
            answer.body
        );
        sent.push(Sent {
            key,
            via,
            first: answer.body,
        });
    }
    sent
}

/// What is wrong with `answers` (one per key of `sent`, at the gateway `at` names): each must
/// replay its key's first answer, and the key must have run once.
fn wrong(sent: &[Sent], answers: &[Answer], at: &str, up: &KeyedUpstream) -> Vec<String> {
    let mut wrong = Vec::new();
    for (s, a) in sent.iter().zip(answers) {
        let runs = up.runs(&s.key);
        if a.status != 201 || !a.replayed || a.body != s.first || runs != 1 {
            wrong.push(format!(
                "{} (first through {}) at {at}: {} replayed={} body {} (first {}), executed {runs} times",
                s.key, NAMES[s.via], a.status, a.replayed, a.body, s.first
            ));
        }
    }
    wrong
}

/// A round's directory: the gateways' configurations, journals and logs. Deleted when the
/// round passes; kept, with copies of the servers' logs, when it fails (`failed`, or a
/// panic; or always, with `IDEMGATE_FAILOVER_KEEP` set).
struct Evidence {
    dir: Option<tempfile::TempDir>,
    cluster: PathBuf,
    round: usize,
    failed: bool,
}

impl Evidence {
    fn new(round: usize, cluster: &Cluster) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("idemgate-failover-")
            .tempdir()
            .unwrap();
        Self {
            dir: Some(dir),
            cluster: cluster.dir.clone(),
            round,
            failed: false,
        }
    }

    fn path(&self) -> &Path {
        self.dir.as_ref().expect("live until dropped").path()
    }

    /// Starts gateway `name` on `store` (table `table`), with its own journal and log.
    async fn gateway(&self, name: &str, upstream: &str, store: &str, table: &str) -> Process {
        let config = self.path().join(format!("{name}.toml"));
        let journal = self.path().join(format!("{name}.journal"));
        let text = format!(
            "store = \"{store}\"\nstore_table = \"{table}\"\n\
             forward_journal_file = \"{}\"\nfailover_grace = \"3s\"\n",
            journal.display()
        );
        std::fs::write(&config, text).unwrap();
        spawn_logged(upstream, &config, &self.path().join(format!("{name}.log"))).await
    }

    /// How many records gateway `name` says its journal restored (its `failover handled` log
    /// lines).
    fn restored(&self, name: &str) -> u64 {
        let log = std::fs::read_to_string(self.path().join(format!("{name}.log"))).unwrap();
        let lines = log.lines().filter(|l| l.contains("failover handled"));
        let counts = lines.filter_map(|l| l.split_once(" restored=")?.1.split(' ').next());
        counts.filter_map(|n| n.parse::<u64>().ok()).sum()
    }
}

impl Drop for Evidence {
    fn drop(&mut self) {
        let Some(dir) = self.dir.take() else { return };
        let keep = std::env::var_os("IDEMGATE_FAILOVER_KEEP").is_some();
        if !self.failed && !std::thread::panicking() && !keep {
            return;
        }
        for log in ["primary.log", "standby.log"] {
            let _ = std::fs::copy(self.cluster.join(log), dir.path().join(log));
        }
        let kept = dir.keep();
        eprintln!(
            "failover round {}: the gateways' configurations, journals and logs and the servers' logs are kept in {}",
            self.round,
            kept.display()
        );
    }
}

/// Starts `idemgate serve` on a free port with `config` (no admin listener), its output in
/// `log` (`RUST_LOG` from `IDEMGATE_FAILOVER_LOG`, default `info`), once it accepts
/// connections.
async fn spawn_logged(upstream: &str, config: &Path, log: &Path) -> Process {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = free.local_addr().unwrap().to_string();
    drop(free);
    let out = std::fs::File::create(log).unwrap();
    let filter = std::env::var("IDEMGATE_FAILOVER_LOG").unwrap_or_else(|_| "info".into());
    let child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["serve", "--listen", &listen, "--admin-listen", ""])
        .args(["--upstream", upstream, "--config"])
        .arg(config)
        .env("RUST_LOG", filter)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let mut process = Process {
        child,
        base: format!("http://{listen}"),
    };
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(&listen).await.is_ok() {
            return process;
        }
        if let Some(status) = process.child.try_wait().unwrap() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            panic!("{} exited ({status}): {text}", config.display());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the gateway of {} did not start", config.display());
}

/// Waits (30 s at most) until the standby on `port` has replayed `n` records of `table`.
async fn replicated(port: u16, table: &str, n: usize) {
    let started = Instant::now();
    loop {
        // The table itself reaches the standby with the first records' WAL.
        let count = records(port, table).await;
        if count.is_some_and(|c| c >= n as i64) {
            return;
        }
        let waited = started.elapsed();
        assert!(
            waited < Duration::from_secs(30),
            "the standby has {count:?} of {n} records after {waited:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How many records of `table` the server on `port` holds (`None` before the table exists).
async fn records(port: u16, table: &str) -> Option<i64> {
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    // A server restarting may answer a connection oddly: counted as no answer yet.
    let pool = sqlx::PgPool::connect(&url).await.ok()?;
    let sql = format!("SELECT count(*) FROM {table}");
    let count = sqlx::query_scalar(&sql).fetch_one(&pool).await.ok();
    pool.close().await;
    count
}

/// Kills the primary, loses what the standby had not written, promotes the standby; how
/// many of the `sent` records the standby lacked when it was promoted.
async fn lossy_failover(cluster: &Cluster, table: &str, sent: usize) -> i64 {
    let run = |steps: &[&str]| {
        tokio::task::block_in_place(|| steps.iter().for_each(|step| cluster.run(step)))
    };
    run(&["kill-primary", "drop-receiver"]);
    let held = records(cluster.standby, table).await.unwrap_or(0);
    run(&["promote"]);
    sent as i64 - held
}

/// Right after the promotion, retries every key of `sent`, all at once, first at the gateway
/// that did not answer it first, then at its own; what is wrong with the answers (see
/// [`wrong`]). Prints the round's line: keys, double executions, records the failover `lost`,
/// `503`s before the final answers, and when the last cross-gateway answer came.
async fn retried_everywhere(
    round: usize,
    gws: &[Process; 2],
    sent: &[Sent],
    up: &KeyedUpstream,
    lost: i64,
) -> Vec<String> {
    let promoted = Instant::now();
    let other = sent
        .iter()
        .map(|s| final_answer(&gws[1 - s.via].base, &s.key));
    let answers = join_all(other).await;
    let settled = promoted.elapsed();
    let mut found = wrong(sent, &answers, "the other gateway", up);
    let own = join_all(sent.iter().map(|s| final_answer(&gws[s.via].base, &s.key))).await;
    found.extend(wrong(sent, &own, "its own gateway", up));
    let doubles = sent.iter().filter(|s| up.runs(&s.key) > 1).count();
    let refusals: u32 = answers.iter().map(|a| a.refusals).sum();
    println!(
        "failover round {round}: {} keys, {doubles} double executions, {lost} lost by the failover, {refusals} answers 503 first, last final answer {settled:?} after the promotion",
        sent.len()
    );
    found
}

/// A fresh key runs once through each gateway (once the grace has passed) and is replayed
/// by the other.
async fn fresh_keys_run_once(gws: &[Process; 2], up: &KeyedUpstream) {
    for via in 0..2 {
        let sent = first_answers(gws, via, 1).await;
        let again = final_answer(&gws[1 - via].base, &sent[0].key).await;
        let found = wrong(&sent, &[again], NAMES[1 - via], up);
        assert!(found.is_empty(), "a fresh key: {found:?}");
    }
}

/// One failover on a new cluster; how many keys were checked after it and how many answers
/// were wrong (printed), or `None` when this machine runs no PostgreSQL cluster tests.
async fn failover_round(round: usize, up: &KeyedUpstream) -> Option<(usize, usize)> {
    // Dropped in reverse: the gateways, then the evidence (kept on a failure), the cluster.
    let cluster = Cluster::start("async")?;
    let mut evidence = Evidence::new(round, &cluster);
    let store = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres",
        cluster.primary, cluster.standby
    );
    let table = table();
    let a = evidence.gateway("a", &up.base, &store, &table).await;
    let b = evidence.gateway("b", &up.base, &store, &table).await;
    let gws = [a, b];
    let mut sent = first_answers(&gws, 0, HEALTHY).await;
    sent.extend(first_answers(&gws, 1, HEALTHY).await);
    replicated(cluster.standby, &table, sent.len()).await;

    cluster.run("stall");
    for (via, n) in LAGGED.into_iter().enumerate() {
        sent.extend(first_answers(&gws, via, n).await);
    }
    let lost = lossy_failover(&cluster, &table, sent.len()).await;
    let found = retried_everywhere(round, &gws, &sent, up, lost).await;
    if !found.is_empty() {
        // The next rounds still run: a soak counts every failure.
        let list = found.join("\n");
        println!(
            "failover round {round}: {} wrong answers:\n{list}",
            found.len()
        );
        evidence.failed = true;
    }
    assert!(
        lost > 0,
        "the failover lost no record: nothing was restored"
    );
    fresh_keys_run_once(&gws, up).await;
    let (by_a, by_b) = (evidence.restored("a"), evidence.restored("b"));
    println!("failover round {round}: the journals restored {by_a} (A) + {by_b} (B) records");
    Some((sent.len(), found.len()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_a_lossy_failover_every_retry_at_either_gateway_replays_the_first_answer() {
    let rounds: usize = std::env::var("IDEMGATE_FAILOVER_ROUNDS")
        .map(|v| v.parse().expect("IDEMGATE_FAILOVER_ROUNDS: a number"))
        .unwrap_or(2);
    let up = KeyedUpstream::start().await;
    let started = Instant::now();
    let (mut checked, mut failed) = (0, 0);
    for round in 0..rounds {
        let Some((keys, wrong)) = failover_round(round, &up).await else {
            return;
        };
        checked += keys;
        failed += usize::from(wrong > 0);
    }
    let doubles = up.doubles();
    println!(
        "failover soak: {rounds} rounds, {checked} keys checked, {doubles} double executions, {failed} rounds with wrong answers, {:?}",
        started.elapsed()
    );
    assert_eq!(
        (doubles, failed),
        (0, 0),
        "double executions, failed rounds"
    );
}
