//! The probe against a keyed API with one flaw at a time, each invisible to a single
//! request and its retry: keys compared without letter case, records evicted early, a
//! request of one principal joined to another's in flight, an API that stops mid-run. And
//! against the same API without flaws but slow, with rich replays and a `Location` written
//! two ways, which must pass.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use idemgate_probe::Status;
use tokio::sync::watch;

mod common;
use common::{args, failed, probe};

/// What the API gets wrong, or does unusually but rightly.
#[derive(Clone, Copy, Default)]
struct Flaws {
    /// Keys compared in lower case.
    fold_case: bool,
    /// Only this many newest records kept.
    keep: Option<usize>,
    /// A request waits for, and gets the answer of, any request of its key in flight,
    /// whoever sent it.
    join_in_flight: bool,
    /// Connections refused after this many requests.
    stop_after: Option<usize>,
    /// How long an operation takes (run on a task of its own, whether its client stays).
    slow: Duration,
    /// Replays carry this many extra header fields and a relative `Location`.
    rich_replays: usize,
}

type Done = watch::Receiver<Option<String>>;

#[derive(Default)]
struct State {
    /// Records by principal, path and key: an id, or the watch of an operation running.
    records: HashMap<String, Done>,
    /// Record names, oldest first.
    order: Vec<String>,
    /// Operations in flight by key alone (`join_in_flight`).
    by_key: HashMap<String, Done>,
}

async fn serve(flaws: Flaws) -> String {
    let state = Arc::new(Mutex::new(State::default()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (sent, (stop, mut stopped)) = (Arc::new(AtomicUsize::new(0)), watch::channel(false));
    let origin = base.clone();
    let handler = move |uri: Uri, headers: HeaderMap| {
        let (state, origin) = (state.clone(), origin.clone());
        if flaws
            .stop_after
            .is_some_and(|n| sent.fetch_add(1, SeqCst) + 1 >= n)
        {
            let _ = stop.send(true);
        }
        async move { answer(flaws, &state, &origin, uri.path(), &headers).await }
    };
    let app = Router::new().route("/payments", post(handler));
    tokio::spawn(async move {
        let stops = async move { while stopped.changed().await.is_ok() && !*stopped.borrow() {} };
        axum::serve(listener, app)
            .with_graceful_shutdown(stops)
            .await
    });
    base
}

async fn answer(
    flaws: Flaws,
    state: &Arc<Mutex<State>>,
    origin: &str,
    path: &str,
    headers: &HeaderMap,
) -> Response {
    let field = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
    let key = field("idempotency-key").trim_matches('"').to_owned();
    if key.is_empty() {
        return (StatusCode::BAD_REQUEST, "a key is required").into_response();
    }
    let key = match flaws.fold_case {
        true => key.to_ascii_lowercase(),
        false => key,
    };
    let name = format!("{} {path} {key}", field("authorization"));
    let (mut done, ran) = {
        let mut s = state.lock().unwrap();
        let joined = flaws.join_in_flight.then(|| s.by_key.get(&key).cloned());
        match joined.flatten().or_else(|| s.records.get(&name).cloned()) {
            Some(done) => (done, false),
            None => (begin(state, &mut s, flaws, &name, &key), true),
        }
    };
    if !ran && done.borrow().is_none() && !flaws.join_in_flight {
        return (StatusCode::CONFLICT, [("retry-after", "0")], "in flight").into_response();
    }
    let id = done
        .wait_for(Option::is_some)
        .await
        .unwrap()
        .clone()
        .unwrap();
    let json = [("content-type", "application/json")];
    let mut r = (StatusCode::CREATED, json, format!(r#"{{"id":"{id}"}}"#)).into_response();
    let location = format!("{path}/{id}");
    let h = r.headers_mut();
    if ran || flaws.rich_replays == 0 {
        h.insert("location", format!("{origin}{location}").parse().unwrap());
    } else {
        h.insert("location", location.parse().unwrap());
        for n in 0..flaws.rich_replays {
            let name = HeaderName::try_from(format!("x-extra-{n}")).unwrap();
            h.insert(name, HeaderValue::from_static("1"));
        }
    }
    if !ran {
        h.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    r
}

/// Starts `name`'s operation on a task of its own: its watch gets the id when it is done.
fn begin(state: &Arc<Mutex<State>>, s: &mut State, flaws: Flaws, name: &str, key: &str) -> Done {
    let (tx, rx) = watch::channel(None);
    s.records.insert(name.to_owned(), rx.clone());
    s.order.push(name.to_owned());
    if let Some(keep) = flaws.keep {
        while s.order.len() > keep {
            let old = s.order.remove(0);
            s.records.remove(&old);
        }
    }
    s.by_key.insert(key.to_owned(), rx.clone());
    let id = format!("pay_{}", rand::random::<u32>());
    let (state, key) = (state.clone(), key.to_owned());
    tokio::spawn(async move {
        tokio::time::sleep(flaws.slow).await;
        let _ = tx.send(Some(id));
        // Joined only while in flight: a later request of another principal runs anew.
        state.lock().unwrap().by_key.remove(&key);
        // Kept until every receiver is gone.
        tx.closed().await;
    });
    rx
}

fn url(base: &str) -> String {
    format!("{base}/payments")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_compared_without_letter_case_fail() {
    let base = serve(Flaws {
        fold_case: true,
        ..Flaws::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let report = probe(&args(&dir, &url(&base), &["--profile", "ietf"])).await;
    let detail = failed(&report, "key-compared-whole");
    assert!(detail.starts_with("two keys that differ only in letter case got one answer"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_forgotten_early_fail() {
    let base = serve(Flaws {
        keep: Some(2),
        ..Flaws::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let report = probe(&args(&dir, &url(&base), &["--profile", "ietf"])).await;
    // Each retry right after its first request replays: only a late one shows the loss.
    let replay = report.scenario("replay-same-request").unwrap();
    assert_eq!(replay.status, Status::Passed, "{}", replay.detail);
    let detail = failed(&report, "records-kept");
    assert!(detail.contains("its record was forgotten"), "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_principal_joined_in_flight_fails() {
    let base = serve(Flaws {
        join_in_flight: true,
        slow: Duration::from_millis(300),
        ..Flaws::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let words = ["--second-principal-header", "Authorization: Bearer bob"];
    let report = probe(&args(&dir, &url(&base), &words)).await;
    let detail = failed(&report, "second-principal");
    assert!(detail.contains("both got one answer"), "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_that_stops_mid_run_leaves_it_incomplete() {
    let base = serve(Flaws {
        stop_after: Some(12),
        ..Flaws::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let report = probe(&args(&dir, &url(&base), &["--profile", "ietf"])).await;
    let why = report.incomplete.as_deref().unwrap_or("");
    assert!(
        why.starts_with("the API stopped answering during "),
        "{why}"
    );
    // The scenario it stopped in is cut off, not failed: nothing required failed.
    let cut = "cut off: the API stopped answering during ";
    assert!(report.scenarios.iter().any(|s| s.detail.starts_with(cut)));
    let failed = |s: &&idemgate_probe::ScenarioReport| s.required && s.status == Status::Failed;
    assert_eq!(report.scenarios.iter().find(failed).map(|s| &s.name), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_api_with_rich_replays_passes_what_it_keeps() {
    let base = serve(Flaws {
        slow: Duration::from_secs(1),
        rich_replays: 150,
        ..Flaws::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let words = ["--profile", "ietf", "--request-timeout", "5s"];
    let report = probe(&args(&dir, &url(&base), &words)).await;
    for name in [
        "replay-same-request",
        "replay-headers",
        "concurrent-duplicates",
        "disconnect-then-retry",
        "records-kept",
    ] {
        let s = report.scenario(name).unwrap();
        assert_eq!(s.status, Status::Passed, "{name}: {}", s.detail);
    }
}
