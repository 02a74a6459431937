//! Other spellings of the operation's JSON body: its top-level members in another order,
//! other whitespace, and a changed value (for the mismatch scenario). Values keep their
//! text as written (`1e2` stays `1e2`): only the order and the whitespace between members
//! change.

use std::fmt;

use bytes::Bytes;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;

use super::super::{first, ran_twice};
use super::same_answer;
use crate::probe::Probe;
use crate::report::Verdict;

/// A JSON object's members in the order written, each value's text as written.
struct Members(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Ordered;
        impl<'de> Visitor<'de> for Ordered {
            type Value = Members;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(Ordered)
    }
}

impl Members {
    fn parse(body: &[u8]) -> Option<Self> {
        serde_json::from_slice(body).ok()
    }

    /// The object with `sep` after each `:` and `,`, members in this order.
    fn write(&self, sep: &str) -> Bytes {
        let members: Vec<String> = self
            .0
            .iter()
            .map(|(k, v)| format!("{}:{sep}{}", Value::String(k.clone()), v.get()))
            .collect();
        let (open, close) = match sep {
            "" => ("{", "}"),
            _ => ("{\n  ", "\n}\n"),
        };
        format!("{open}{}{close}", members.join(&format!(",{sep}"))).into()
    }
}

/// The body with one value changed: the first top-level number plus one, else a member
/// added; a body that is not a JSON object gets bytes appended.
pub(crate) fn changed(body: &Bytes) -> Bytes {
    let Some(mut m) = Members::parse(body) else {
        return match body.is_empty() {
            true => Bytes::from_static(b"{\"idemgate_probe_changed\":true}"),
            false => [&body[..], b" probe"].concat().into(),
        };
    };
    let number = (m.0.iter_mut())
        .find_map(|(_, v)| serde_json::from_str::<u64>(v.get()).ok().map(|n| (v, n)));
    let raw = |text: String| RawValue::from_string(text).expect("a number or true is JSON");
    match number {
        Some((v, n)) => *v = raw(n.wrapping_add(1).to_string()),
        None => (m.0).push(("idemgate_probe_changed".into(), raw("true".into()))),
    }
    m.write("")
}

async fn spelled(p: &Probe, spell: fn(&Members, &[u8]) -> Option<Bytes>, what: &str) -> Verdict {
    let Some(other) = Members::parse(&p.opts.body).and_then(|m| spell(&m, &p.opts.body)) else {
        return Verdict::Skipped(format!("the body is not a JSON object {what}"));
    };
    let key = p.key();
    let (e, id) = match first(p, &key).await {
        Ok(found) => found,
        Err(v) => return v,
    };
    let mut retry = p.request(Some(&key));
    retry.body = other;
    let retry = p.send(retry).await;
    if let Err(v) = ran_twice(p, &id, &e, &retry) {
        return v;
    }
    match same_answer(p, &id, &e, &retry) {
        Ok(()) => Verdict::Passed(format!("replayed {id}")),
        Err(Verdict::Failed(d, ex)) => Verdict::Failed(format!("another spelling: {d}"), ex),
        Err(v) => v,
    }
}

pub(crate) async fn member_order(p: &Probe) -> Verdict {
    spelled(
        p,
        |m, _| {
            (m.0.len() >= 2).then(|| {
                let mut reversed = Members(m.0.clone());
                reversed.0.reverse();
                reversed.write("")
            })
        },
        "with two members or more",
    )
    .await
}

pub(crate) async fn whitespace(p: &Probe) -> Verdict {
    spelled(
        p,
        |m, body| {
            let spaced = m.write(" ");
            Some(if spaced[..] == *body {
                m.write("")
            } else {
                spaced
            })
        },
        "",
    )
    .await
}
