//! The key's scope: another principal, another operation and other spellings of the same
//! path never share an answer, and never run a keyed operation a second time (README "The
//! contract": records are scoped to principal, route and key; `#ambiguous-path`).

use super::replay::same_answer;
use super::{first, ran_first, ran_twice, scenario, settled, Scenario};
use crate::http::{Exchange, Request};
use crate::probe::{replayed, stored_form_replay, success, Probe};
use crate::report::Verdict;

pub(crate) fn all() -> Vec<Scenario> {
    vec![
        scenario!(
            "second-principal",
            Required,
            2 * PAIR_TRIES + 2,
            second_principal,
            "The same key from a second principal, sent at the same time, is its own \
             execution (its own id, never the first principal's answer), its retry replays \
             its own, and the first principal's retry still replays the first (contract: \
             records scoped to principal, route and key)"
        ),
        scenario!(
            "second-route",
            Required,
            2 * PAIR_TRIES + 2,
            second_route,
            "The same key on another operation (--second-url), sent at the same time, never \
             gets this operation's answer; each operation's retry replays its own (contract: \
             records scoped to the route)"
        ),
        scenario!(
            "path-double-slash",
            Advisory,
            2,
            double_slash,
            "The retry spelled with a doubled slash (//x) replays or is refused with 4xx, \
             never runs again (contract #ambiguous-path)"
        ),
        scenario!(
            "path-escaped-letter",
            Advisory,
            2,
            escaped,
            "The retry with a letter of its path percent-escaped (%61 for a) replays or is \
             refused with 4xx, never runs again (contract #ambiguous-path)"
        ),
        scenario!(
            "path-trailing-slash",
            Advisory,
            2,
            trailing,
            "The retry with a trailing slash added (or removed) replays or is refused with \
             4xx, never runs again (contract #ambiguous-path)"
        ),
        scenario!(
            "method-letter-case",
            Advisory,
            2,
            method_case,
            "The retry with its method in lower case (post) replays or is refused with 4xx, \
             never runs again: methods are case-sensitive (RFC 9110 §9.1; contract \
             #ambiguous-request)"
        ),
    ]
}

async fn method_case(p: &Probe) -> Verdict {
    let lower = p.opts.method.as_str().to_ascii_lowercase();
    let Ok(method) = http::Method::from_bytes(lower.as_bytes()) else {
        return Verdict::Skipped("the method has no lower-case spelling".into());
    };
    if method == p.opts.method {
        return Verdict::Skipped("the method is already in lower case".into());
    }
    retried_as(p, &lower, |r| r.method = method).await
}

/// Most sends of each request of the pair sent at once, while the other is in flight
/// ([`settled`]).
const PAIR_TRIES: usize = 5;

/// Sends the key's first request and `other` (another principal's or route's) at once,
/// each until it is not answered `409`: a server that shares a record or lock between
/// them only while one is in flight shows it here. The first's id, or why it has none.
async fn at_once(
    p: &Probe,
    key: &str,
    other: Request,
) -> (Result<String, Verdict>, Exchange, Exchange) {
    let (e, other) = tokio::join!(
        settled(p, p.request(Some(key)), PAIR_TRIES),
        settled(p, other, PAIR_TRIES)
    );
    (ran_first(p, key, &e), e, other)
}

async fn second_principal(p: &Probe) -> Verdict {
    let key = p.key();
    let Some(request) = p.as_second(&key) else {
        return Verdict::Skipped("no --second-principal-header".into());
    };
    let (id, e, other) = at_once(p, &key, request.clone()).await;
    let id = match id {
        Ok(id) => id,
        Err(v) => return v,
    };
    if answered_as_first(p, &id, &other) {
        let why = format!("two principals sent one key at once; both got one answer (id \"{id}\")");
        return Verdict::failed(why, &[&e, &other]);
    }
    let Some(other_id) = p.id(&other).filter(|_| success(other.status())) else {
        let why = format!(
            "the second principal's request was answered {} without an id",
            other.status()
        );
        return Verdict::failed(why, &[&e, &other]);
    };
    let again = p.send(request).await;
    if let Err(v) = same_answer(p, &other_id, &other, &again) {
        return v;
    }
    if let Err(v) = still_first(p, &key, &id, &e, "the second principal's").await {
        return v;
    }
    Verdict::Passed(format!(
        "sent at once: ids \"{id}\" and \"{other_id}\", each replayed to its principal"
    ))
}

async fn second_route(p: &Probe) -> Verdict {
    let Some(path) = p.opts.second_path.clone() else {
        return Verdict::Skipped("no --second-url".into());
    };
    let key = p.key();
    let mut request = p.request(Some(&key));
    request.path = path;
    let (id, e, other) = at_once(p, &key, request.clone()).await;
    let id = match id {
        Ok(id) => id,
        Err(v) => return v,
    };
    if answered_as_first(p, &id, &other) {
        let why = format!(
            "one key sent at once to both operations; the other got this one's answer (id \"{id}\")"
        );
        return Verdict::failed(why, &[&e, &other]);
    }
    // The other operation's retry keeps its own answer, where it ran (a record of one
    // written over by the other's shows here or in this one's retry).
    if let Some(other_id) = p.id(&other).filter(|_| success(other.status())) {
        let again = p.send(request).await;
        if let Err(v) = same_answer(p, &other_id, &other, &again) {
            return v;
        }
    }
    if let Err(v) = still_first(p, &key, &id, &e, "the other operation's").await {
        return v;
    }
    Verdict::Passed(format!(
        "sent at once: the other operation answered {} on its own; this one still replays \"{id}\"",
        other.status()
    ))
}

/// Whether `other` (another principal's or route's request under the key) got the first
/// answer: the first's id, or a replay (marked, or in a stored form) of it. A body alike
/// alone proves nothing: the id may be in `Location` only.
fn answered_as_first(p: &Probe, id: &str, other: &Exchange) -> bool {
    if let Some(other_id) = p.id(other) {
        return other_id == id;
    }
    other.answer.as_ref().is_ok_and(replayed) || stored_form_replay(other)
}

/// Retries the key's first request as first sent: it must still replay `id` (another
/// principal's or route's request, `whose`, did not take the record over).
async fn still_first(
    p: &Probe,
    key: &str,
    id: &str,
    e: &Exchange,
    whose: &str,
) -> Result<(), Verdict> {
    let back = p.send(p.request(Some(key))).await;
    match same_answer(p, id, e, &back) {
        Ok(()) => Ok(()),
        Err(Verdict::Failed(d, ex)) => Err(Verdict::Failed(
            format!("after {whose} request, the first request's retry: {d}"),
            ex,
        )),
        Err(v) => Err(v),
    }
}

/// Retries the key's request at `spelled` (the path and query) after a first at the
/// operation's own path ([`retried_as`]).
async fn respelled(p: &Probe, spelled: Option<String>) -> Verdict {
    let Some(path) = spelled else {
        return Verdict::Skipped("the path has no letter or segment to respell".into());
    };
    retried_as(p, &path.clone(), |r| r.path = path).await
}

/// Retries a new key's first request changed by `edit` (shown as `label`): a replay or a
/// `4xx` without an id passes; a new id is a second run.
async fn retried_as(p: &Probe, label: &str, edit: impl FnOnce(&mut Request)) -> Verdict {
    let key = p.key();
    let (e, id) = match first(p, &key).await {
        Ok(found) => found,
        Err(v) => return v,
    };
    let mut request = p.request(Some(&key));
    edit(&mut request);
    let retry = p.send(request).await;
    if let Err(v) = ran_twice(p, &id, &e, &retry) {
        return v;
    }
    match (p.replay_id(&retry, &id), retry.status()) {
        (Some(_), _) => Verdict::Passed(format!("{label}: replayed {id}")),
        (None, s @ 400..=499) => Verdict::Passed(format!("{label}: refused with {s}")),
        // A method not implemented ran nothing.
        (None, 501) => Verdict::Passed(format!("{label}: not run, answered 501")),
        // A redirect to the operation's own spelling ran nothing; one to anywhere else
        // (a resource it just made) may have run.
        (None, s @ (301 | 302 | 307 | 308)) => redirected(p, label, s, &id, &e, &retry),
        (None, s) => refused_badly(label, s, &e, &retry),
    }
}

/// The verdict on a retry answered with the redirect `status`: passed when its `Location`
/// is the operation's own URL or the first's id (both resolved).
fn redirected(
    p: &Probe,
    label: &str,
    status: u16,
    id: &str,
    e: &Exchange,
    retry: &Exchange,
) -> Verdict {
    let location = (retry.answer.as_ref().ok())
        .map(|a| a.header("location"))
        .filter(|l| !l.is_empty())
        .map(|l| p.resolved(l));
    let own = p.resolved(&p.opts.path);
    match location {
        Some(to) if to == own || to == id || p.resolved(id) == to => {
            Verdict::Passed(format!("{label}: not run, redirected ({status}) to {to}"))
        }
        Some(to) => Verdict::failed(
            format!(
                "{label}: answered {status} to {to}, neither the operation's own URL nor the \
                 first answer's id: it may have run again"
            ),
            &[e, retry],
        ),
        None => Verdict::failed(
            format!("{label}: answered {status} without a Location"),
            &[e, retry],
        ),
    }
}

fn refused_badly(path: &str, status: u16, e: &Exchange, retry: &Exchange) -> Verdict {
    let why = format!(
        "{path}: answered {status} without an id: it may have run again (expected the \
         replay, a 4xx, a redirect or 501)"
    );
    Verdict::failed(why, &[e, retry])
}

/// The path and query split at the query.
fn split(path: &str) -> (&str, &str) {
    path.find('?').map_or((path, ""), |at| path.split_at(at))
}

async fn double_slash(p: &Probe) -> Verdict {
    let (path, query) = split(&p.opts.path);
    let spelled = path
        .rfind('/')
        .map(|at| format!("{}/{}{query}", &path[..at], &path[at..]));
    respelled(p, spelled).await
}

async fn escaped(p: &Probe) -> Verdict {
    let (path, query) = split(&p.opts.path);
    let letter = path
        .char_indices()
        .rev()
        .find(|(_, c)| c.is_ascii_alphabetic());
    let spelled =
        letter.map(|(at, c)| format!("{}%{:02X}{}{query}", &path[..at], c as u8, &path[at + 1..]));
    respelled(p, spelled).await
}

async fn trailing(p: &Probe) -> Verdict {
    let (path, query) = split(&p.opts.path);
    let spelled = match path.strip_suffix('/') {
        Some("") => None,
        Some(bare) => Some(format!("{bare}{query}")),
        None => Some(format!("{path}/{query}")),
    };
    respelled(p, spelled).await
}
