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

/// Most bodies [`changed`] makes: one per top-level member changed (spread over the
/// object when it has more).
pub(crate) const CHANGED: usize = 8;

/// The body with one value changed, at most [`CHANGED`] ways, each with what changed: in a
/// JSON object, each top-level member's value in turn (a server that leaves a member out
/// of its fingerprint replays one of them), a nested object or array changed at its first
/// leaf value, not in its shape; otherwise bytes appended.
pub(crate) fn changed(body: &Bytes) -> Vec<(String, Bytes)> {
    let Some(m) = Members::parse(body).filter(|m| !m.0.is_empty()) else {
        let other = match body.is_empty() {
            true => Bytes::from_static(b"{\"idemgate_probe_changed\":true}"),
            false => [&body[..], b" probe"].concat().into(),
        };
        return vec![("bytes appended".into(), other)];
    };
    let n = m.0.len();
    let step = n.div_ceil(CHANGED);
    // The last member always among them: spread from the first to the last.
    let mut at: Vec<usize> = (0..n).step_by(step).collect();
    if at.last() != Some(&(n - 1)) {
        if at.len() >= CHANGED {
            at.pop();
        }
        at.push(n - 1);
    }
    let variant = |i: usize| {
        let mut other = Members(m.0.clone());
        let (name, value) = &mut other.0[i];
        let parsed: Value = serde_json::from_str(value.get()).unwrap_or(Value::Null);
        let changed = changed_value(parsed).to_string();
        *value = RawValue::from_string(changed).expect("a serde_json value is JSON");
        (
            format!("member {} changed", Value::String(name.clone())),
            other.write(""),
        )
    };
    at.into_iter().map(variant).collect()
}

/// `value` changed, its type and shape kept where they can be: a number plus one, a string
/// with `-probe` appended, a boolean negated, `null` made `true`; an object or array at its
/// first member or element (a member or element added when it has none).
fn changed_value(value: Value) -> Value {
    match value {
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => Value::from(u.wrapping_add(1)),
            (_, Some(i), _) => Value::from(i.wrapping_add(1)),
            (_, _, f) => Value::from(f.unwrap_or(0.0) + 1.0),
        },
        Value::String(s) => Value::String(format!("{s}-probe")),
        Value::Bool(b) => Value::Bool(!b),
        Value::Null => Value::Bool(true),
        Value::Array(mut items) => {
            match items.first_mut() {
                Some(first) => *first = changed_value(first.take()),
                None => items.push(Value::Bool(true)),
            }
            Value::Array(items)
        }
        Value::Object(mut members) => {
            match members.values_mut().next() {
                Some(first) => *first = changed_value(first.take()),
                None => {
                    members.insert("idemgate_probe_changed".into(), Value::Bool(true));
                }
            }
            Value::Object(members)
        }
    }
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
