//! The edges of the contract: a body over the limit, a `5xx` and its retry, a retry after
//! the key's advertised lifetime, and methods that are never deduplicated (README "The
//! contract"; docs/clients.md).

use std::time::Duration;

use super::replay::same_answer;
use super::{first, refused, scenario, Scenario};
use crate::options::Profile;
use crate::probe::{replayed, success, Probe};
use crate::report::Verdict;

/// Longest advertised key lifetime the expiry scenario waits out.
const MAX_LIFETIME: Duration = Duration::from_secs(60);

/// The edges, the key's lifetime last of them (it waits the longest: the records of keys
/// run before it are checked by `records-kept` within their lifetime).
pub(crate) fn all() -> Vec<Scenario> {
    let mut all = other();
    all.push(lifetime_scenario());
    all
}

fn lifetime_scenario() -> Scenario {
    scenario!(
        "key-lifetime",
        Advisory,
        3,
        lifetime,
        "Within the advertised key lifetime (Idempotency-Key-Lifetime or --key-lifetime) \
         a retry replays, up to a twentieth of it (at least 500 ms) before its end; after it \
         the key is new and runs again (contract; docs/clients.md)"
    )
}

fn other() -> Vec<Scenario> {
    vec![
        scenario!(
            "body-too-large",
            Advisory,
            1,
            too_large,
            "A body over --max-body-bytes is refused with 413 (problem+json) and does not \
             run (contract)"
        ),
        scenario!(
            "failed-then-retried",
            Advisory,
            2,
            failed,
            "A request answered 5xx (--failing-body-file) and retried with its key is not run \
             again behind the client's back: the retry gets a 5xx problem+json (the earlier \
             attempt failed) or the stored answer; a 503 ('nothing done') \
             may run again (contract)"
        ),
        scenario!(
            "repeated-content-type",
            NotARule,
            1,
            two_types,
            "A keyed request with two Content-Type fields is refused with 400 and does not \
             run: servers may read its body as either (contract #ambiguous-request)"
        ),
        scenario!(
            "get-not-deduplicated",
            NotARule,
            3,
            get_twice,
            "GET is never deduplicated: the same key on a GET of the created resource is \
             answered by the API each time, never marked as a replay (contract)"
        ),
    ]
}

async fn too_large(p: &Probe) -> Verdict {
    let mut request = p.request(Some(&p.key()));
    let pad = (p.opts.max_body_bytes + 1).saturating_sub(request.body.len());
    let mut body = request.body.to_vec();
    // Trailing whitespace keeps a JSON body JSON.
    body.resize(body.len() + pad, b' ');
    request.body = body.into();
    let e = p.send(request).await;
    refused(
        p,
        &e,
        &[413],
        &format!("a {}-byte body", p.opts.max_body_bytes + 1),
    )
}

async fn failed(p: &Probe) -> Verdict {
    let Some(body) = p.opts.failing_body.clone() else {
        return Verdict::Skipped("no --failing-body-file".into());
    };
    let key = p.key();
    let mut request = p.request(Some(&key));
    request.body = body;
    let e = p.send(request.clone()).await;
    if !(500..600).contains(&e.status()) {
        return Verdict::failed(
            format!("the failing body was answered {}, not 5xx", e.status()),
            &[&e],
        );
    }
    if matches!(e.status(), 503) {
        return Verdict::Passed("503: nothing done, a retry may run".into());
    }
    let retry = p.send(request).await;
    let Ok(a) = &retry.answer else {
        return Verdict::failed("the retry got no answer", &[&e, &retry]);
    };
    let first = e.answer.as_ref().expect("a 5xx answer");
    let server_error = (500..600).contains(&a.status);
    let verdict = if replayed(a) && a.status == first.status {
        format!("the {} was replayed", a.status)
    } else if a.status == first.status && a.body == first.body {
        // A stored failure replayed unmarked and a rerun that failed the same way look alike.
        format!(
            "the retry was answered as the first ({}): stored, or failed again alike",
            a.status
        )
    } else if server_error && (a.is_problem() || p.profile() == Profile::Ietf) {
        format!("the retry was answered {} naming the failure", a.status)
    } else {
        let why = format!(
            "the retry of a {} was answered {}: run again, not the earlier failure",
            first.status, a.status
        );
        return Verdict::failed(why, &[&e, &retry]);
    };
    Verdict::Passed(verdict)
}

async fn lifetime(p: &Probe) -> Verdict {
    let key = p.key();
    let (e, id) = match first(p, &key).await {
        Ok(found) => found,
        Err(v) => return v,
    };
    let advertised = e
        .answer
        .as_ref()
        .ok()
        .and_then(|a| a.header("idempotency-key-lifetime").parse().ok());
    let Some(life) = advertised.map(Duration::from_secs).or(p.opts.key_lifetime) else {
        return Verdict::Skipped("no Idempotency-Key-Lifetime field and no --key-lifetime".into());
    };
    if life > MAX_LIFETIME {
        return Verdict::Skipped(format!(
            "the key lifetime ({}s) is over {}s",
            life.as_secs(),
            MAX_LIFETIME.as_secs()
        ));
    }
    // Late in the lifetime (a twentieth of it before its end, at least 500 ms): a key kept
    // for less than it advertises fails here.
    let margin = (life / 20).max(Duration::from_millis(500));
    tokio::time::sleep(life.saturating_sub(margin)).await;
    let within = p.send(p.request(Some(&key))).await;
    if let Err(v) = same_answer(p, &id, &e, &within) {
        return v;
    }
    tokio::time::sleep(margin + Duration::from_millis(1500)).await;
    let after = p.send(p.request(Some(&key))).await;
    match p.id(&after) {
        Some(other) if other != id => {
            Verdict::Passed(format!(
                "replayed {}s into the {}s lifetime, ran again after it ({other})",
                life.saturating_sub(margin).as_secs(),
                life.as_secs()
            ))
        }
        Some(_) => Verdict::failed(
            format!("the key outlived its advertised lifetime ({}s): a client reusing it for a new operation gets the old answer", life.as_secs()),
            &[&e, &after],
        ),
        None => Verdict::failed(format!("after the lifetime the key's request was answered {} without an id", after.status()), &[&after]),
    }
}

async fn two_types(p: &Probe) -> Verdict {
    let mut request = p.request(Some(&p.key()));
    let ct = http::header::CONTENT_TYPE;
    // Two fields whatever the operation sends: one of its own (or JSON) and text/plain.
    if !request.headers.iter().any(|(n, _)| *n == ct) {
        let json = http::HeaderValue::from_static("application/json");
        request.headers.push((ct.clone(), json));
    }
    let text = http::HeaderValue::from_static("text/plain");
    request.headers.push((ct, text));
    let e = p.send(request).await;
    refused(p, &e, &[400], "two Content-Type fields")
}

async fn get_twice(p: &Probe) -> Verdict {
    let key = p.key();
    let (e, _) = match first(p, &key).await {
        Ok(found) => found,
        Err(v) => return v,
    };
    let location = e
        .answer
        .as_ref()
        .map(|a| a.header("location"))
        .ok()
        .filter(|l| !l.is_empty())
        .map(|l| p.resolved(l))
        .unwrap_or_default();
    // A Location on the probed host is fetched by its path.
    let location = match location.parse::<http::Uri>() {
        Ok(uri) if uri.authority().is_some() && uri.authority() == p.opts.url.authority() => uri
            .path_and_query()
            .map_or(location, |pq| pq.as_str().to_owned()),
        _ => location,
    };
    if !location.starts_with('/') {
        return Verdict::Skipped("the answer has no Location path to GET".into());
    }
    let mut request = p.request(Some(&key));
    (request.method, request.path, request.body) =
        (http::Method::GET, location.clone(), Default::default());
    let one = p.send(request.clone()).await;
    let two = p.send(request).await;
    match (&one.answer, &two.answer) {
        (Ok(a), Ok(b)) if !replayed(a) && !replayed(b) && success(a.status) => Verdict::Passed(
            format!("GET {location}: {} twice, never a replay", a.status),
        ),
        (Ok(a), Ok(b)) if !replayed(a) && !replayed(b) => Verdict::Skipped(format!(
            "GET {location} was answered {}: no resource to read there",
            a.status
        )),
        (Ok(a), Ok(b)) if replayed(a) || replayed(b) => Verdict::failed(
            format!("GET {location} with a key was answered as a replay"),
            &[&one, &two],
        ),
        _ => Verdict::failed(format!("GET {location} got no answer"), &[&one, &two]),
    }
}
