//! The baseline and the key's syntax: a key is required, 8–128 printable ASCII characters
//! as an RFC 8941 `sf-string` or bare, one per request (README "The contract",
//! `#missing-key`, `#invalid-key`; draft-07 §2.1 and §2.7).

use super::{first as first_of, refused, scenario, Scenario, FIRST};
use crate::http::Exchange;
use crate::probe::Probe;
use crate::report::Verdict;

/// The baseline: a keyed request runs and answers with an id, and another key's with
/// another: without that, no other scenario can tell one execution from two.
pub(crate) fn first() -> Scenario {
    let mut s = scenario!(
        "first-request",
        Required,
        2,
        baseline,
        "A keyed request runs the operation and answers 2xx with the resource's id \
         (--id-pointer or Location); the same request under another key is another \
         operation with another id. Without both the probe cannot judge: the run is \
         incomplete (exit 2)"
    );
    s.name = FIRST;
    s
}

pub(crate) fn all() -> Vec<Scenario> {
    vec![
        scenario!(
            "key-required",
            Required,
            1,
            missing,
            "A request without Idempotency-Key is refused with 400 and does not run \
             (draft-07 §2.7; contract #missing-key, problem+json)"
        ),
        scenario!(
            "problem-details",
            Advisory,
            1,
            problem_details,
            "An error answer is RFC 9457 problem details: application/problem+json with \
             type, title and a status member equal to the HTTP status (draft-07 §2.7)"
        ),
        scenario!(
            "key-too-short",
            NotARule,
            1,
            too_short,
            "A key under 8 characters is refused with 400 (contract #invalid-key)"
        ),
        scenario!(
            "key-too-long",
            NotARule,
            1,
            too_long,
            "A key over 128 characters is refused with 400 (contract #invalid-key)"
        ),
        scenario!(
            "key-length-bounds",
            NotARule,
            4,
            bounds,
            "Keys of exactly 8 and 128 characters are accepted, each its own execution; \
             128-character keys that differ only at their start or end are different keys \
             (the whole key is compared, never a part)"
        ),
        scenario!(
            "key-compared-whole",
            Required,
            4,
            whole,
            "Keys are compared whole and case-sensitively: keys that differ only in letter \
             case, or only in one character at their middle, are different keys, each its \
             own execution (draft-07 §2.1: the key is an sf-string, compared as written)"
        ),
        scenario!(
            "key-forms",
            NotARule,
            4,
            forms,
            "A key as an sf-string (\"k\") and bare (k) is the same key: the bare retry \
             replays; a key sent bare from its first request is recorded, and its bare retry \
             replays (draft-07 §2.1; contract)"
        ),
        scenario!(
            "key-empty",
            Advisory,
            1,
            empty,
            "An empty key (\"\") is refused with 400 (contract #invalid-key)"
        ),
        scenario!(
            "key-not-printable",
            NotARule,
            2,
            not_printable,
            "A key with a tab or a byte over 0x7e is refused with 400 (contract #invalid-key)"
        ),
        scenario!(
            "two-keys",
            Advisory,
            2,
            two,
            "Two Idempotency-Key fields, or two keys in one field, are refused with 400: \
             the server cannot know which the client meant (contract #invalid-key)"
        ),
    ]
}

async fn baseline(p: &Probe) -> Verdict {
    let (one, two) = (p.key(), p.key());
    let (e1, id1) = match first_of(p, &one).await {
        Ok(found) => found,
        Err(v) => return v,
    };
    let e2 = p.send(p.request(Some(&two))).await;
    let id2 = match p.id(&e2) {
        Some(id2) if id2 == id1 => id2,
        _ => match super::ran_first(p, &two, &e2) {
            Ok(id2) => id2,
            Err(v) => return v,
        },
    };
    if id1 == id2 {
        let why = format!(
            "two keys answered with one id (\"{id1}\"): ids do not tell executions apart \
             (another --id-pointer?)"
        );
        return Verdict::failed(why, &[&e1, &e2]);
    }
    Verdict::Passed(format!(
        "{} with id \"{id1}\"; another key, id \"{id2}\"",
        e1.status()
    ))
}

async fn whole(p: &Probe) -> Verdict {
    // A key in capitals beside the same in lower case, and two 128-character keys that
    // differ in one character at their middle (character 64), so that a server keeping any
    // start and end of under 64 characters each, or any first 63, runs them as one: four
    // keys, four executions.
    let lower = p.key();
    let (start, end) = (p.key(), p.key());
    let mid = |c: char| {
        let fill = 64 - 1 - start.len();
        let tail = 128 - 64 - end.len();
        format!("{start}{}{c}{}{end}", "x".repeat(fill), "x".repeat(tail))
    };
    let (mid_a, mid_b) = (mid('m'), mid('n'));
    let keys = [
        (lower.clone(), ""),
        (lower.to_ascii_uppercase(), "only in letter case"),
        (mid_a, ""),
        (mid_b, "only at their middle"),
    ];
    // A key answered with an earlier key's id fails in `first_of` (`ran_first`).
    for (key, differs) in keys {
        if let Err(v) = first_of(p, &key).await {
            return match differs {
                "" => v,
                _ => with(&format!("two keys that differ {differs}"), v),
            };
        }
    }
    Verdict::Passed("keys differing only in letter case or at their middle ran apart".into())
}

async fn missing(p: &Probe) -> Verdict {
    let e = p.send(p.request(None)).await;
    refused(p, &e, &[400], "without a key")
}

async fn problem_details(p: &Probe) -> Verdict {
    let e = p.send(p.request(None)).await;
    let Ok(a) = &e.answer else {
        return Verdict::failed("no answer", &[&e]);
    };
    if !(400..600).contains(&a.status) {
        return Verdict::Skipped(format!("a request without a key was answered {}", a.status));
    }
    let json: Option<serde_json::Value> = serde_json::from_slice(&a.body).ok();
    let member = |m: &str| json.as_ref().and_then(|j| j.get(m)).cloned();
    let shaped = a.is_problem()
        && member("type").is_some_and(|t| t.is_string())
        && member("title").is_some_and(|t| t.is_string())
        && member("status") == Some(serde_json::Value::from(a.status));
    match shaped {
        true => Verdict::Passed(format!("{}: type, title and status", a.status)),
        false => Verdict::failed(
            format!(
                "the {} is not problem+json with type, title and status {}",
                a.status, a.status
            ),
            &[&e],
        ),
    }
}

async fn too_short(p: &Probe) -> Verdict {
    let key = &p.key()[..7];
    let e = p.send(p.request(Some(key))).await;
    refused(p, &e, &[400], "a 7-character key")
}

async fn too_long(p: &Probe) -> Verdict {
    let key = format!("{:x<129}", p.key());
    let e = p.send(p.request(Some(&key))).await;
    refused(p, &e, &[400], "a 129-character key")
}

async fn bounds(p: &Probe) -> Verdict {
    let short = format!("{:08x}", rand::random::<u32>());
    let (e8, id8) = match first_of(p, &short).await {
        Ok(found) => found,
        Err(v) => return with("an 8-character key", v),
    };
    // Three 128-character keys: the second differs from the first only at its end, the
    // third only at its start, so a server that keeps part of a key runs one of them as a
    // replay of the first.
    let (start, end) = (p.key(), p.key());
    let long = |a: &str, b: &str| format!("{a}{}{b}", "x".repeat(128 - a.len() - b.len()));
    let keys = [
        long(&start, &end),
        long(&start, &p.key()),
        long(&p.key(), &end),
    ];
    let mut seen = vec![(e8, id8)];
    for (n, key) in keys.iter().enumerate() {
        let (e, id) = match first_of(p, key).await {
            Ok(found) => found,
            Err(v) => return with("a 128-character key", v),
        };
        if let Some((other, _)) = seen.iter().find(|(_, known)| *known == id) {
            let why = match n {
                0 => format!(
                    "two keys answered with one id ({id}): ids do not tell executions apart"
                ),
                _ => format!(
                    "two 128-character keys that differ only at their {} got one id ({id}): \
                     the key is cut short, so other keys replay each other's answers",
                    if n == 1 { "end" } else { "start" }
                ),
            };
            return Verdict::failed(why, &[other, &e]);
        }
        seen.push((e, id));
    }
    let ids: Vec<&str> = seen.iter().map(|(_, id)| id.as_str()).collect();
    Verdict::Passed(format!("ids {}, each key whole", ids.join(", ")))
}

async fn forms(p: &Probe) -> Verdict {
    let key = p.key();
    let (e, id) = match first_of(p, &key).await {
        Ok(found) => found,
        Err(v) => return v,
    };
    let retry = p.send(p.request_with_keys(&[key.as_bytes()])).await;
    if let Err(v) = bare_replays(p, &key, &id, &e, &retry) {
        return v;
    }
    // A client that always sends the bare form: its first request is recorded too.
    let bare = p.key();
    let e = p.send(p.request_with_keys(&[bare.as_bytes()])).await;
    let id = match super::ran_first(p, &bare, &e) {
        Ok(id) => id,
        Err(v) => return with("a bare key's first request", v),
    };
    let retry = p.send(p.request_with_keys(&[bare.as_bytes()])).await;
    if let Err(v) = bare_replays(p, &bare, &id, &e, &retry) {
        return v;
    }
    Verdict::Passed(format!(
        "the bare retry replayed; a bare key's bare retry replayed {id}"
    ))
}

/// A failure unless `retry` (with the bare key) replayed `id`.
fn bare_replays(
    p: &Probe,
    key: &str,
    id: &str,
    e: &Exchange,
    retry: &Exchange,
) -> Result<(), Verdict> {
    match p.replay_id(retry, id) {
        Some(other) if other == id => Ok(()),
        Some(other) => Err(Verdict::failed(
            format!("ran twice: key {key} and its bare retry gave ids {id} and {other}"),
            &[e, retry],
        )),
        None => Err(Verdict::failed(
            format!(
                "the bare form of the key was answered {} without the first's id",
                retry.status()
            ),
            &[e, retry],
        )),
    }
}

async fn empty(p: &Probe) -> Verdict {
    let e = p.send(p.request_with_keys(&[b"\"\""])).await;
    refused(p, &e, &[400], "an empty key")
}

async fn not_printable(p: &Probe) -> Verdict {
    let tab = format!("\"{}\t\"", p.key());
    let e = p.send(p.request_with_keys(&[tab.as_bytes()])).await;
    if let v @ Verdict::Failed(..) = refused(p, &e, &[400], "a key with a tab") {
        return v;
    }
    let mut high = format!("\"{}", p.key()).into_bytes();
    high.extend_from_slice(b"\xe9\"");
    let e = p.send(p.request_with_keys(&[&high])).await;
    with_passed(
        refused(p, &e, &[400], "a key with byte 0xe9"),
        "a tab and 0xe9 refused",
    )
}

async fn two(p: &Probe) -> Verdict {
    let (a, b) = (p.key(), p.key());
    let fields = [format!("\"{a}\""), format!("\"{b}\"")];
    let e = p
        .send(p.request_with_keys(&[fields[0].as_bytes(), fields[1].as_bytes()]))
        .await;
    if let v @ Verdict::Failed(..) = refused(p, &e, &[400], "two Idempotency-Key fields") {
        return v;
    }
    let list = format!("\"{}\", \"{}\"", p.key(), p.key());
    let e = p.send(p.request_with_keys(&[list.as_bytes()])).await;
    with_passed(
        refused(p, &e, &[400], "two keys in one field"),
        "both refused with 400",
    )
}

/// `v` with `what` before its first line.
fn with(what: &str, v: Verdict) -> Verdict {
    match v {
        Verdict::Failed(d, e) => Verdict::Failed(format!("{what}: {d}"), e),
        other => other,
    }
}

/// `v`, or `detail` when it passed.
fn with_passed(v: Verdict, detail: &str) -> Verdict {
    match v {
        Verdict::Passed(_) => Verdict::Passed(detail.to_owned()),
        other => other,
    }
}
