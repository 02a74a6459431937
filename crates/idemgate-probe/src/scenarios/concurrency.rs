//! Duplicates at once and a client that leaves: one execution whatever the timing (README
//! "The contract", `#request-in-flight`; draft-07 §2.7: `409` for a request still being
//! processed).

use std::time::Duration;

use futures_util::future::join_all;

use super::replay::same_answer;
use super::{ran_first, scenario, settled, Ietf, Scenario};
use crate::http::Exchange;
use crate::options::Profile;
use crate::probe::{replayed, stored_form_replay, success, Probe};
use crate::report::Verdict;

/// Most retries of a request answered `409` while its first is in flight (within
/// `--request-timeout`: [`settled`]).
const IN_FLIGHT_RETRIES: usize = 20;

pub(crate) fn duplicates() -> Scenario {
    let mut s = scenario!(
        "concurrent-duplicates",
        Required,
        1,
        at_once,
        "N duplicates sent at once run once: one id; the others get 409 with Retry-After \
         (problem+json) or the replay; a retry afterwards replays (draft-07 §2.7; contract \
         #request-in-flight)"
    );
    s.per_duplicate = true;
    s.ietf = Ietf::Required;
    s
}

/// Most different keys sent at once.
const KEYS_AT_ONCE: usize = 8;

pub(crate) fn keys() -> Scenario {
    scenario!(
        "concurrent-keys",
        Required,
        2 * KEYS_AT_ONCE,
        keys_at_once,
        "Different keys sent at once (up to 8, at most --concurrency) each run with an id of \
         their own, and their retries, sent at once, each replay their own id: one key's \
         request never gets another's answer (contract: a record per key)"
    )
}

async fn keys_at_once(p: &Probe) -> Verdict {
    let keys: Vec<String> = (0..p.opts.concurrency.clamp(2, KEYS_AT_ONCE))
        .map(|_| p.key())
        .collect();
    let firsts = join_all(keys.iter().map(|k| p.send(p.request(Some(k))))).await;
    let mut ids: Vec<String> = Vec::new();
    for (key, e) in keys.iter().zip(&firsts) {
        let id = match ran_first(p, key, e) {
            Ok(id) => id,
            Err(Verdict::Failed(d, ex)) => {
                let why = format!("{} different keys sent at once, one: {d}", keys.len());
                return Verdict::Failed(why, ex);
            }
            Err(v) => return v,
        };
        if let Some(at) = ids.iter().position(|known| *known == id) {
            let why = format!(
                "{} different keys sent at once, two answered with one id (\"{id}\"): one \
                 key got another's answer",
                keys.len()
            );
            return Verdict::failed(why, &[&firsts[at], e]);
        }
        ids.push(id);
    }
    let retries = join_all(keys.iter().map(|k| p.send(p.request(Some(k))))).await;
    for ((id, e), retry) in ids.iter().zip(&firsts).zip(&retries) {
        if let Err(Verdict::Failed(d, ex)) = same_answer(p, id, e, retry) {
            let why = format!("the retries of {} keys sent at once: {d}", keys.len());
            return Verdict::Failed(why, ex);
        }
    }
    Verdict::Passed(format!(
        "{} keys at once: {} ids, each replayed to its key",
        keys.len(),
        ids.len()
    ))
}

pub(crate) fn disconnect() -> Scenario {
    scenario!(
        "disconnect-then-retry",
        Required,
        IN_FLIGHT_RETRIES + 2,
        left,
        "A client that sends a request and closes the connection before the answer, then \
         retries, gets the first execution's answer (after 409s while it runs): one id \
         (contract; the seed incident of a client timing out)"
    )
}

async fn at_once(p: &Probe) -> Verdict {
    let key = p.key();
    let sends = (0..p.opts.concurrency).map(|_| p.send(p.request(Some(&key))));
    let answers = join_all(sends).await;
    let mut ids: Vec<(String, &Exchange)> = Vec::new();
    for e in &answers {
        if let Some(id) = p.id(e) {
            if !ids.iter().any(|(known, _)| *known == id) {
                ids.push((id, e));
            }
            continue;
        }
        if stored_form_replay(e) {
            continue;
        }
        if let Err(v) = in_flight(p, e) {
            return v;
        }
    }
    if ids.len() > 1 {
        let list: Vec<&str> = ids.iter().map(|(id, _)| id.as_str()).collect();
        let shown: Vec<&Exchange> = ids.iter().take(2).map(|(_, e)| *e).collect();
        let why = format!("ran {} times: one key, ids {}", ids.len(), list.join(", "));
        return Verdict::failed(why, &shown);
    }
    let Some((id, e)) = ids.first() else {
        return Verdict::failed("no duplicate was answered with an id", &[&answers[0]]);
    };
    let after = p.send(p.request(Some(&key))).await;
    if let Err(v) = same_answer(p, id, e, &after) {
        return v;
    }
    let conflicts = answers.iter().filter(|e| e.status() == 409).count();
    let replays = answers.len() - conflicts - 1;
    Verdict::Passed(format!(
        "{} at once: one id ({id}), {conflicts} answered 409, {replays} replayed",
        answers.len()
    ))
}

/// A failure unless `e` is a `409` with `Retry-After` (and problem+json under the idemgate
/// profile): a duplicate answered while the first runs.
fn in_flight(p: &Probe, e: &Exchange) -> Result<(), Verdict> {
    let Ok(a) = &e.answer else {
        return Err(Verdict::failed("a duplicate got no answer", &[e]));
    };
    if a.status != 409 {
        let why = format!(
            "a duplicate was answered {} without an id: expected 409 or the replay",
            a.status
        );
        return Err(Verdict::failed(why, &[e]));
    }
    // draft-07 §2.7 asks for 409 alone; Retry-After and problem+json are idemgate's.
    if p.profile() == Profile::Ietf {
        return Ok(());
    }
    if a.header("retry-after").is_empty() {
        return Err(Verdict::failed("a 409 without Retry-After", &[e]));
    }
    if !a.is_problem() {
        return Err(Verdict::failed(
            "a 409 without application/problem+json",
            &[e],
        ));
    }
    Ok(())
}

async fn left(p: &Probe) -> Verdict {
    let key = p.key();
    let retried = async {
        // The abandoned request reaches the server before its retry.
        tokio::time::sleep(Duration::from_millis(100)).await;
        settled(p, p.request(Some(&key)), IN_FLIGHT_RETRIES).await
    };
    let (abandoned, retry) = tokio::join!(p.abandon(p.request(Some(&key))), retried);
    let abandoned = match abandoned {
        Ok(e) => e,
        Err(e) => return Verdict::Failed(format!("could not send the request: {e:#}"), vec![]),
    };
    if !success(retry.status()) {
        let why = match retry.status() {
            409 => format!(
                "the retry after a disconnect was still answered 409 when its retries ended \
                 (at most {IN_FLIGHT_RETRIES} within --request-timeout, {:?})",
                p.opts.request_timeout
            ),
            s => format!("the retry after a disconnect was answered {s}"),
        };
        return Verdict::failed(why, &[&abandoned, &retry]);
    }
    let Some(id) = p.id(&retry) else {
        return without_id(p, &key, retry).await;
    };
    // A server that still wrote the abandoned request's answer shows what it ran.
    if let Some(first) = p.id(&abandoned).filter(|first| *first != id) {
        let why = format!(
            "ran twice: the abandoned request ran (id {first}, its answer written after the \
             client left) and its retry ran again (id {id})"
        );
        return Verdict::failed(why, &[&abandoned, &retry]);
    }
    let again = p.send(p.request(Some(&key))).await;
    if let Err(v) = same_answer(p, &id, &retry, &again) {
        return v;
    }
    let marked = |e: &Exchange| e.answer.as_ref().is_ok_and(replayed);
    match (p.id(&abandoned).is_some(), marked(&retry), marked(&again)) {
        (true, _, _) => Verdict::Passed(format!(
            "the abandoned request's answer (id {id}, written after the client left) was \
             replayed to the retries"
        )),
        (false, true, _) => Verdict::Passed(format!("the retries replayed {id}")),
        // Replays are marked, but not this one: the abandoned request's outcome was not
        // kept. An API that cancels a request whose client left before it ran does that
        // rightly; one that ran it and forgot it runs twice. The abandoned request got no
        // answer, so nothing outside tells which.
        (false, false, true) => Verdict::Passed(format!(
            "the retries answered {id}; the first retry ran anew (not marked \
             Idempotent-Replayed as the next is): the abandoned request was cancelled before \
             it ran, or ran and was forgotten (a second run), and with no answer to it which \
             is not seen"
        )),
        (false, false, false) => Verdict::Passed(format!(
            "the retries answered {id}; replays are not marked and the abandoned request got \
             no answer, so whether it ran is not seen"
        )),
    }
}

/// The retry after a disconnect had no id: a replay whose stored form left it out passes
/// when the next retry is that replay again.
async fn without_id(p: &Probe, key: &str, retry: Exchange) -> Verdict {
    if !stored_form_replay(&retry) {
        return Verdict::failed(
            format!("the retry has no id in {}", p.id_source()),
            &[&retry],
        );
    }
    let again = p.send(p.request(Some(key))).await;
    match stored_form_replay(&again) && again.status() == retry.status() {
        true => Verdict::Passed("the retries replayed the stored form of the first answer".into()),
        false => Verdict::failed(
            "the second retry is not the first's replay",
            &[&retry, &again],
        ),
    }
}
