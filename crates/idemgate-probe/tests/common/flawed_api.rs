//! A keyed payments API with one flaw at a time (or none): each flaw invisible to a single
//! request and its retry. An operation runs on a task of its own, whether its client stays.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use tokio::sync::watch;
use tokio::time::Instant;

/// What the API gets wrong, or does unusually but rightly.
#[derive(Clone, Copy, Default)]
pub(crate) struct Flaws {
    /// Keys compared in lower case.
    pub fold_case: bool,
    /// Keys longer than `a + b` compared by their first `a` and last `b` characters.
    pub key_ends: Option<(usize, usize)>,
    /// Only this many newest records kept.
    pub keep: Option<usize>,
    /// Records forgotten this long after they were made.
    pub forget_after: Option<Duration>,
    /// `Idempotency-Key-Lifetime` on every answer.
    pub lifetime: Option<&'static str>,
    /// Only this JSON member of the body is compared under a key (422 when it differs).
    pub fingerprint: Option<&'static str>,
    /// This top-level JSON member is left out of the comparison.
    pub fingerprint_skips: Option<&'static str>,
    /// Nested objects and arrays compared by their shape alone (member names, lengths).
    pub fingerprint_shape: bool,
    /// Keys compared with their characters sorted (anagrams are one key).
    pub key_sorted: bool,
    /// A bare (unquoted) key replays a record, but runs unrecorded when it has none.
    pub bare_unrecorded: bool,
    /// A request waits for, and gets the answer of, any request of its key in flight,
    /// whoever sent it.
    pub join_in_flight: bool,
    /// The key is kept in one slot shared by every request while it is read (a race
    /// between different keys sent at once).
    pub shared_slot: bool,
    /// Any other path or method runs the operation again and redirects (`302`) to the
    /// new resource.
    pub redirect_others: bool,
    /// A keyless request's `400` echoes its `Authorization` field.
    pub echo_auth: bool,
    /// Connections refused after this many requests.
    pub stop_after: Option<usize>,
    /// How long an operation takes.
    pub slow: Duration,
    /// Replays carry this many extra header fields and a relative `Location`.
    pub rich_replays: usize,
}

type Done = watch::Receiver<Option<String>>;

#[derive(Default)]
struct State {
    /// Records by principal, path and key: the watch of its operation (the id once done),
    /// the fingerprint, when made.
    records: HashMap<String, (Done, String, Instant)>,
    /// Record names, oldest first.
    order: Vec<String>,
    /// Operations in flight by key alone (`join_in_flight`).
    by_key: HashMap<String, Done>,
    /// The shared slot (`shared_slot`).
    slot: String,
}

/// Serves `flaws`' API on `POST /payments`; its base URL.
pub(crate) async fn serve(flaws: Flaws) -> String {
    let state = Arc::new(Mutex::new(State::default()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (sent, (stop, mut stopped)) = (Arc::new(AtomicUsize::new(0)), watch::channel(false));
    let origin = base.clone();
    let handler = move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
        let (state, origin) = (state.clone(), origin.clone());
        let count = sent.fetch_add(1, SeqCst) + 1;
        if flaws.stop_after.is_some_and(|n| count >= n) {
            let _ = stop.send(true);
        }
        async move {
            if method != Method::POST || uri.path() != "/payments" {
                return redirect(flaws, &origin, &uri).await;
            }
            answer(flaws, &state, &origin, &headers, &body).await
        }
    };
    let app = Router::new()
        .route("/payments", any(handler.clone()))
        .fallback(handler);
    tokio::spawn(async move {
        let stops = async move { while stopped.changed().await.is_ok() && !*stopped.borrow() {} };
        axum::serve(listener, app)
            .with_graceful_shutdown(stops)
            .await
    });
    base
}

/// Another spelling: `404`, or with `redirect_others` a new run redirected to.
async fn redirect(flaws: Flaws, origin: &str, uri: &Uri) -> Response {
    if !flaws.redirect_others {
        return (StatusCode::NOT_FOUND, format!("no {}", uri.path())).into_response();
    }
    let id = format!("pay_{}", rand::random::<u32>());
    let to = format!("{origin}/payments/{id}");
    (StatusCode::FOUND, [("location", to)]).into_response()
}

fn key_of(flaws: Flaws, headers: &HeaderMap) -> Option<String> {
    let key = headers.get("idempotency-key")?.to_str().ok()?;
    let mut key = key.trim_matches('"').to_owned();
    if flaws.key_sorted {
        let mut chars: Vec<char> = key.chars().collect();
        chars.sort_unstable();
        key = chars.into_iter().collect();
    }
    let key = match flaws.fold_case {
        true => key.to_ascii_lowercase(),
        false => key,
    };
    Some(match flaws.key_ends {
        Some((a, b)) if key.len() > a + b => format!("{}{}", &key[..a], &key[key.len() - b..]),
        _ => key,
    })
}

async fn answer(
    flaws: Flaws,
    state: &Arc<Mutex<State>>,
    origin: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
    let Some(mut key) = key_of(flaws, headers) else {
        let echo = auth.filter(|_| flaws.echo_auth).unwrap_or("");
        let token = echo.rsplit(' ').next().unwrap_or("");
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(token);
        let upper = token.to_ascii_uppercase();
        let text = format!("a key is required ({echo}; {b64}; {upper})");
        return (StatusCode::BAD_REQUEST, text).into_response();
    };
    if flaws.shared_slot {
        state.lock().unwrap().slot = key;
        tokio::time::sleep(Duration::from_millis(30)).await;
        key = state.lock().unwrap().slot.clone();
    }
    let print = fingerprint(flaws, body);
    let bare = (headers.get("idempotency-key")).is_some_and(|v| !v.as_bytes().starts_with(b"\""));
    let name = format!("{} {key}", auth.unwrap_or(""));
    let found = {
        let mut s = state.lock().unwrap();
        forget(&mut s, flaws);
        let joined = flaws.join_in_flight.then(|| s.by_key.get(&key).cloned());
        let kept = s.records.get(&name).map(|(d, p, _)| (d.clone(), p.clone()));
        match (joined.flatten(), kept) {
            (Some(done), _) => Ok((done, false)),
            (None, Some((_, p))) if compares(flaws) && p != print => Err(()),
            (None, Some((done, _))) => Ok((done, false)),
            (None, None) if bare && flaws.bare_unrecorded => {
                let done = begin(state, &mut s, flaws, &name, &key, print);
                s.records.remove(&name);
                Ok((done, true))
            }
            (None, None) => Ok((begin(state, &mut s, flaws, &name, &key, print), true)),
        }
    };
    let Ok((mut done, ran)) = found else {
        return (StatusCode::UNPROCESSABLE_ENTITY, "another body").into_response();
    };
    if !ran && done.borrow().is_none() && !flaws.join_in_flight {
        return (StatusCode::CONFLICT, [("retry-after", "0")], "in flight").into_response();
    }
    let id = done.wait_for(Option::is_some).await.unwrap().clone();
    created(flaws, origin, &id.unwrap(), ran)
}

/// Whether a body is compared under a key at all (the flawless API ignores bodies).
fn compares(flaws: Flaws) -> bool {
    flaws.fingerprint.is_some() || flaws.fingerprint_skips.is_some() || flaws.fingerprint_shape
}

/// What is compared of `body` under a key.
fn fingerprint(flaws: Flaws, body: &Bytes) -> String {
    use serde_json::Value;
    let json: Value = serde_json::from_slice(body).unwrap_or_default();
    if let Some(member) = flaws.fingerprint {
        return json[member].to_string();
    }
    let Value::Object(mut members) = json else {
        return String::from_utf8_lossy(body).into_owned();
    };
    if let Some(skipped) = flaws.fingerprint_skips {
        members.remove(skipped);
    }
    if flaws.fingerprint_shape {
        fn shape(v: &Value) -> Value {
            match v {
                Value::Object(m) => m.keys().map(|k| Value::from(k.clone())).collect(),
                Value::Array(a) => Value::from(a.len()),
                other => other.clone(),
            }
        }
        let shaped = members.iter().map(|(k, v)| (k.clone(), shape(v)));
        members = shaped.collect();
    }
    Value::Object(members).to_string()
}

/// The `201` of `id`, first (`ran`) or replayed.
fn created(flaws: Flaws, origin: &str, id: &str, ran: bool) -> Response {
    let json = [("content-type", "application/json")];
    let mut r = (StatusCode::CREATED, json, format!(r#"{{"id":"{id}"}}"#)).into_response();
    let location = format!("/payments/{id}");
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
    if let Some(life) = flaws.lifetime {
        h.insert("idempotency-key-lifetime", HeaderValue::from_static(life));
    }
    if !ran {
        h.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    r
}

/// Drops the records past `keep` or `forget_after`.
fn forget(s: &mut State, flaws: Flaws) {
    if let Some(after) = flaws.forget_after {
        s.records.retain(|_, (_, _, at)| at.elapsed() < after);
    }
    if let Some(keep) = flaws.keep {
        while s.order.len() > keep {
            let old = s.order.remove(0);
            s.records.remove(&old);
        }
    }
}

/// Starts `name`'s operation on a task of its own: its watch gets the id when it is done.
fn begin(
    state: &Arc<Mutex<State>>,
    s: &mut State,
    flaws: Flaws,
    name: &str,
    key: &str,
    print: String,
) -> Done {
    let (tx, rx) = watch::channel(None);
    s.records
        .insert(name.to_owned(), (rx.clone(), print, Instant::now()));
    s.order.push(name.to_owned());
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
