//! The incidents: each scenario against the example payments API ([`crate::payments`]),
//! once directly and once through a gateway started by the caller.

use std::future::Future;
use std::time::Duration;

use reqwest::{Client, StatusCode};

use crate::{Spawned, Stop};

/// What one run of an incident produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// What the client saw, attempt by attempt.
    pub seen: Vec<String>,
    /// Charges in the ledger afterwards.
    pub charges: usize,
}

/// One incident, without and with the gateway.
#[derive(Debug, Clone)]
pub struct Incident {
    /// Its name.
    pub name: &'static str,
    /// Straight to the API.
    pub without: Outcome,
    /// Through idemgate.
    pub with: Outcome,
}

/// Runs every incident and prints the results.
///
/// # Errors
/// When a server cannot start, or an incident ends with other than one charge through the
/// gateway.
pub async fn run(gateway: impl AsyncFn(&str, &str, Stop) -> Spawned) -> anyhow::Result<()> {
    println!(
        "Replaying the incidents against the example payments API, without and with idemgate.\n"
    );
    let incidents = run_incidents(gateway).await?;
    let mut ok = true;
    for (i, inc) in incidents.iter().enumerate() {
        println!("{}. {}", i + 1, inc.name);
        for (label, o) in [
            ("without idemgate", &inc.without),
            ("with idemgate   ", &inc.with),
        ] {
            println!(
                "   {label}: client saw {:<44} ledger: {} charge{}",
                o.seen.join(", "),
                o.charges,
                if o.charges == 1 { "" } else { "s" }
            );
        }
        ok &= inc.with.charges == 1;
        println!();
    }
    if !ok {
        anyhow::bail!("an incident charged more than once through the gateway");
    }
    println!("Through idemgate every incident charged exactly once.");
    Ok(())
}

/// Runs every incident; each gets fresh API instances and a fresh gateway from `gateway`.
///
/// # Errors
/// When a server cannot start.
pub async fn run_incidents(
    gateway: impl AsyncFn(&str, &str, Stop) -> Spawned,
) -> anyhow::Result<Vec<Incident>> {
    let g = &gateway;
    Ok(vec![
        incident(g, "A timeout, then a retry", timeout_then_retry).await?,
        incident(g, "A double click", double_click).await?,
        incident(g, "A retry with a changed amount", changed_amount).await?,
        incident(g, "A burst of 20 concurrent duplicates", burst).await?,
        incident(g, "A client that disconnects, then retries", disconnect).await?,
    ])
}

async fn incident<F, Fut>(
    gateway: &impl AsyncFn(&str, &str, Stop) -> Spawned,
    name: &'static str,
    scenario: F,
) -> anyhow::Result<Incident>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Vec<String>>,
{
    let (direct, direct_ledger) = crate::payments::spawn().await?;
    let without = Outcome {
        seen: scenario(direct).await,
        charges: settle(&direct_ledger).await,
    };
    let (upstream, ledger) = crate::payments::spawn().await?;
    let dir = tempfile::tempdir()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (base, running) = gateway(
        &upstream,
        &format!("sqlite://{}", dir.path().join("demo.db").display()),
        Box::pin(async move {
            let _ = stopped.await;
        }),
    )
    .await?;
    let with = Outcome {
        seen: scenario(base).await,
        charges: settle(&ledger).await,
    };
    // Stop the gateway before its database is deleted with `dir`.
    let _ = stop.send(());
    let _ = running.await;
    drop(dir);
    Ok(Incident {
        name,
        without,
        with,
    })
}

/// Waits for charges still running (the API finishes them after a disconnect).
async fn settle(ledger: &crate::payments::Ledger) -> usize {
    tokio::time::sleep(Duration::from_millis(1200)).await;
    ledger.count()
}

fn client() -> Client {
    Client::builder()
        .no_proxy()
        .build()
        .expect("a plain HTTP client builds")
}

/// One POST /payments; describes what the client saw.
async fn pay(
    base: &str,
    key: &str,
    amount: u64,
    delay_ms: u64,
    timeout: Duration,
) -> (String, Option<u64>) {
    let res = client()
        .post(format!("{base}/payments?delay_ms={delay_ms}"))
        .header("idempotency-key", key)
        .header("authorization", "Bearer demo-customer")
        .json(&serde_json::json!({"amount": amount, "currency": "EUR"}))
        .timeout(timeout)
        .send()
        .await;
    match res {
        Err(e) if e.is_timeout() => ("timeout".into(), None),
        Err(e) => (format!("error ({e})"), None),
        Ok(r) => {
            let replayed = r.headers().contains_key("idempotent-replayed");
            let retry_after = r
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok());
            let wait = (r.status() == StatusCode::CONFLICT).then(|| retry_after.unwrap_or(1));
            let replay = if replayed { " (replay)" } else { "" };
            (format!("{}{replay}", r.status().as_u16()), wait)
        }
    }
}

/// A client that retries on timeout and on 409 (after `Retry-After`), up to 4 attempts.
async fn pay_with_retries(
    base: &str,
    key: &str,
    delay_ms: u64,
    first_timeout: Duration,
) -> Vec<String> {
    let mut seen = Vec::new();
    let mut timeout = first_timeout;
    for _ in 0..4 {
        let (s, wait) = pay(base, key, 1000, delay_ms, timeout).await;
        let done = s != "timeout" && wait.is_none();
        seen.push(s);
        if done {
            break;
        }
        if let Some(secs) = wait {
            tokio::time::sleep(Duration::from_secs(secs)).await;
        }
        timeout = Duration::from_secs(5);
    }
    seen
}

fn fresh_key() -> String {
    format!("demo-{:016x}", rand_u64())
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

async fn timeout_then_retry(base: String) -> Vec<String> {
    // The charge takes 800 ms; the client gives up after 300 ms and retries.
    pay_with_retries(&base, &fresh_key(), 800, Duration::from_millis(300)).await
}

async fn double_click(base: String) -> Vec<String> {
    let key = fresh_key();
    vec![
        pay(&base, &key, 1000, 0, Duration::from_secs(5)).await.0,
        pay(&base, &key, 1000, 0, Duration::from_secs(5)).await.0,
    ]
}

async fn changed_amount(base: String) -> Vec<String> {
    let key = fresh_key();
    vec![
        pay(&base, &key, 1000, 0, Duration::from_secs(5)).await.0,
        pay(&base, &key, 1500, 0, Duration::from_secs(5)).await.0,
    ]
}

async fn burst(base: String) -> Vec<String> {
    let key = fresh_key();
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let (base, key) = (base.clone(), key.clone());
            tokio::spawn(async move { pay(&base, &key, 1000, 200, Duration::from_secs(5)).await.0 })
        })
        .collect();
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for t in tasks {
        let seen = t.await.unwrap_or_else(|_| "error".into());
        *counts.entry(seen).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(s, n)| format!("{n}x {s}"))
        .collect()
}

async fn disconnect(base: String) -> Vec<String> {
    let key = fresh_key();
    // The client hangs up after 50 ms of a 400 ms charge, and retries half a second later.
    let (first, _) = pay(&base, &key, 1000, 400, Duration::from_millis(50)).await;
    let first = if first == "timeout" {
        "disconnected".to_owned()
    } else {
        first
    };
    tokio::time::sleep(Duration::from_millis(600)).await;
    let mut seen = vec![first];
    seen.extend(pay_with_retries(&base, &key, 400, Duration::from_secs(5)).await);
    seen
}
