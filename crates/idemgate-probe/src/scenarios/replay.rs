//! Replays: the same request gets the first answer back without running again; another
//! body under the same key is refused; the same JSON in another member order or whitespace
//! is the same request (README "The contract"; draft-07 §2.6, §2.7).

use super::{first, ran_twice, refused, scenario, Scenario};
use crate::http::{Answer, Exchange};
use crate::probe::{replayed, stored_form_changed, Probe};
use crate::report::Verdict;

mod json;

pub(crate) fn all() -> Vec<Scenario> {
    let mut all = vec![
        scenario!(
            "replay-same-request",
            Required,
            3,
            same_request,
            "The same key and request, sent again (twice), get the first answer back: its \
             status, body and id, without running again (draft-07 §2.6; contract)"
        ),
        scenario!(
            "replay-marker",
            NotARule,
            2,
            marker,
            "A replay carries Idempotent-Replayed: true, the first answer does not (contract)"
        ),
        scenario!(
            "replay-headers",
            Required,
            2,
            headers,
            "A replay carries the first answer's Content-Type and Location (contract: stored \
             status, headers and body)"
        ),
        scenario!(
            "fingerprint-mismatch",
            Required,
            json::CHANGED + 2,
            mismatch,
            "The same key with another body (each top-level JSON member changed in turn, up \
             to 8 spread over the object; a nested value changed at a leaf) is refused with 422 (or 400) and does not run; the key's \
             first answer is untouched (draft-07 §2.7; contract, problem+json)"
        ),
        scenario!(
            "json-member-order",
            NotARule,
            2,
            json::member_order,
            "The same JSON body with its members in another order is the same request: \
             replayed (contract: JSON compared in RFC 8785 canonical form)"
        ),
        scenario!(
            "json-whitespace",
            NotARule,
            2,
            json::whitespace,
            "The same JSON body with other whitespace is the same request: replayed \
             (contract: JSON compared in RFC 8785 canonical form)"
        ),
    ];
    // Another spelling replayed proves nothing when the body is not compared at all.
    for s in all.iter_mut().filter(|s| s.name.starts_with("json-")) {
        s.needs = Some("fingerprint-mismatch");
    }
    all
}

async fn same_request(p: &Probe) -> Verdict {
    let key = p.key();
    let (e, id) = match first(p, &key).await {
        Ok(found) => found,
        Err(v) => return v,
    };
    for n in 1..=2 {
        let retry = p.send(p.request(Some(&key))).await;
        if let Err(v) = same_answer(p, &id, &e, &retry) {
            return with_retry(n, v);
        }
    }
    Verdict::Passed(format!("two retries replayed {} with id {id}", e.status()))
}

/// A failure unless `retry` is `first`'s answer again: its status, its id, and its body
/// (or a body the server's stored form changed on purpose, marked so).
pub(crate) fn same_answer(
    p: &Probe,
    id: &str,
    first: &Exchange,
    retry: &Exchange,
) -> Result<(), Verdict> {
    ran_twice(p, id, first, retry)?;
    let (Ok(a), Ok(b)) = (&first.answer, &retry.answer) else {
        return Err(Verdict::failed("the retry got no answer", &[first, retry]));
    };
    if a.status != b.status {
        let why = format!(
            "the retry was answered {}, the first {}",
            b.status, a.status
        );
        return Err(Verdict::failed(why, &[first, retry]));
    }
    if a.body != b.body && !stored_form_changed(b) && !same_json(p, a, b) {
        return Err(Verdict::failed(
            "the retry's body differs from the first's",
            &[first, retry],
        ));
    }
    if p.id(retry).is_none() && !stored_form_changed(b) {
        return Err(Verdict::failed("the retry has no id", &[first, retry]));
    }
    // A replay in a stored form is taken at its word for its body, not for its Location.
    if let (Some(one), Some(two)) = (location(a), location(b)) {
        let (one, two) = (p.resolved(one), p.resolved(two));
        if one != two {
            let why = format!("ran twice: the retry's Location is {two}, the first's {one}");
            return Err(Verdict::failed(why, &[first, retry]));
        }
    }
    Ok(())
}

/// `a`'s `Location`, if it has one.
fn location(a: &Answer) -> Option<&str> {
    Some(a.header("location")).filter(|l| !l.is_empty())
}

/// Under `--profile ietf`, whether both bodies are JSON of equal value: the draft asks for
/// the same response, not the same bytes (a server may store the value and write it anew).
/// idemgate's contract replays the stored bytes.
fn same_json(p: &Probe, a: &Answer, b: &Answer) -> bool {
    let value = |body: &[u8]| serde_json::from_slice::<serde_json::Value>(body).ok();
    p.profile() == crate::options::Profile::Ietf
        && value(&a.body).is_some_and(|v| Some(v) == value(&b.body))
}

fn with_retry(n: usize, v: Verdict) -> Verdict {
    match v {
        Verdict::Failed(d, e) => Verdict::Failed(format!("retry {n}: {d}"), e),
        other => other,
    }
}

/// A new key's first request and its retry, the retry checked to be the first's answer
/// ([`same_answer`]).
async fn replayed_once(p: &Probe) -> Result<(Exchange, Exchange), Verdict> {
    let key = p.key();
    let (e, id) = first(p, &key).await?;
    let retry = p.send(p.request(Some(&key))).await;
    same_answer(p, &id, &e, &retry)?;
    Ok((e, retry))
}

async fn marker(p: &Probe) -> Verdict {
    let (e, retry) = match replayed_once(p).await {
        Ok(pair) => pair,
        Err(v) => return v,
    };
    let (Ok(a), Ok(b)) = (&e.answer, &retry.answer) else {
        return Verdict::failed("no answer", &[&e, &retry]);
    };
    match (replayed(a), replayed(b)) {
        (false, true) => Verdict::Passed("the replay alone is marked".into()),
        (true, _) => Verdict::failed("the first answer is marked Idempotent-Replayed", &[&e]),
        (false, false) => {
            Verdict::failed("the replay lacks Idempotent-Replayed: true", &[&e, &retry])
        }
    }
}

async fn headers(p: &Probe) -> Verdict {
    let (e, retry) = match replayed_once(p).await {
        Ok(pair) => pair,
        Err(v) => return v,
    };
    let (Ok(a), Ok(b)) = (&e.answer, &retry.answer) else {
        return Verdict::failed("no answer", &[&e, &retry]);
    };
    let differ: Vec<&str> = ["Content-Type", "Location"]
        .into_iter()
        .filter(|n| field(p, a, n) != field(p, b, n))
        .collect();
    match differ.as_slice() {
        [] => Verdict::Passed("Content-Type and Location equal".into()),
        [one] => Verdict::failed(format!("the replay's {one} differs"), &[&e, &retry]),
        _ => Verdict::failed(
            "the replay's Content-Type and Location differ",
            &[&e, &retry],
        ),
    }
}

/// The values of `a`'s field `name`; a `Location` resolved against the target URL (a
/// relative and an absolute spelling of one URI are equal).
fn field(p: &Probe, a: &Answer, name: &str) -> Vec<Vec<u8>> {
    let values = a.headers.get_all(name).iter();
    let resolved = |v: &http::HeaderValue| match (name, v.to_str()) {
        ("Location", Ok(text)) => p.resolved(text).into_bytes(),
        _ => v.as_bytes().to_vec(),
    };
    values.map(resolved).collect()
}

async fn mismatch(p: &Probe) -> Verdict {
    let key = p.key();
    let (e, id) = match first(p, &key).await {
        Ok(found) => found,
        Err(v) => return v,
    };
    let mut statuses = Vec::new();
    for (what, body) in json::changed(&p.opts.body) {
        let mut other = p.request(Some(&key));
        other.body = body;
        let changed = p.send(other).await;
        if let Err(v) = ran_twice(p, &id, &e, &changed) {
            return v;
        }
        if p.replay_id(&changed, &id).as_deref() == Some(id.as_str()) {
            let why = format!(
                "another body under the key ({what}) got the first answer back: that part of \
                 the body is not compared"
            );
            return Verdict::failed(why, &[&e, &changed]);
        }
        let what = format!("another body under the key ({what})");
        let verdict = refused(p, &changed, &[422, 400], &what);
        if matches!(verdict, Verdict::Failed(..)) {
            return verdict;
        }
        statuses.push(changed.status().to_string());
    }
    let again = p.send(p.request(Some(&key))).await;
    if let Err(v) = same_answer(p, &id, &e, &again) {
        return with_retry(1, v);
    }
    Verdict::Passed(format!(
        "{} other bodies refused with {}; the first answer still replays",
        statuses.len(),
        statuses.join(", ")
    ))
}
