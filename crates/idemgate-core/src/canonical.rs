//! Canonical JSON for fingerprints: RFC 8785 member order and string form, numbers exactly
//! as written, or nothing.
//!
//! [`canonical_json`] writes a JSON text with its members sorted by UTF-16 code units and its
//! strings in the RFC 8785 (JCS) form (§3.2.2.2, §3.2.3), without whitespace, so member
//! order, whitespace and string escapes (`"\u00e9"` vs `"é"`) never change a fingerprint.
//! Numbers are kept **as written**: RFC 8785 rewrites them as ECMAScript doubles, which makes
//! `1000.0`, `1e3` and `1000` one number and `9007199254740993` equal to
//! `9007199254740992`, while an upstream that reads integers or decimals exactly sees
//! different requests. The text must be valid UTF-8 JSON with unique member names (after
//! unescaping) and no lone surrogates; otherwise it returns `None` and the caller hashes the
//! raw bytes (DESIGN.md, "Fingerprint safety"). [`jcs`] is plain RFC 8785, for comparison.
//!
//! ```
//! use idemgate_core::canonical::canonical_json;
//!
//! let a = canonical_json(br#"{ "b": 2, "a": 1.50 }"#, &[]).unwrap();
//! assert_eq!(a, br#"{"a":1.50,"b":2}"#);
//! assert_eq!(canonical_json(br#"{"a":1,"a":2}"#, &[]), None);
//! ```

use std::borrow::Cow;
use std::collections::HashSet;

use serde_json::Value;

/// Deepest nesting accepted (serde_json's own recursion limit). Deeper texts are hashed raw.
const MAX_DEPTH: usize = 128;

/// Canonicalizes `body` (see the module docs) after removing the values named by `ignore`
/// (RFC 6901 JSON Pointers; a pointer that names nothing is skipped).
///
/// Returns `None` when the text is not valid JSON, holds duplicate member names or a lone
/// surrogate, or nests deeper than 128 levels.
pub fn canonical_json(body: &[u8], ignore: &[String]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(body).ok()?;
    // serde_json checks the grammar (numbers, control characters, escapes) in full.
    serde_json::from_str::<serde::de::IgnoredAny>(text).ok()?;
    let mut value = Parser::new(text).value(0)?;
    for pointer in ignore {
        remove_pointer(&mut value, pointer);
    }
    let mut out = Vec::with_capacity(body.len());
    write(&value, &mut out);
    Some(out)
}

/// Plain RFC 8785: parses `body` as I-JSON (numbers as IEEE-754 doubles, the last of
/// duplicate names wins) and writes its canonical form. Not safe for fingerprints: it makes
/// `1000.0` and `1000`, or `9007199254740993` and `9007199254740992`, one value.
pub fn jcs(body: &[u8]) -> Option<Vec<u8>> {
    let value: Value = serde_json::from_slice(body).ok()?;
    serde_json_canonicalizer::to_vec(&value).ok()
}

/// A parsed JSON value that keeps numbers and literals as written.
pub(crate) enum Json<'a> {
    /// `null`, `true`, `false` or a number, as written.
    Literal(&'a str),
    String(Cow<'a, str>),
    Array(Vec<Json<'a>>),
    Object(Vec<(Cow<'a, str>, Json<'a>)>),
}

/// Removes the value a JSON Pointer (RFC 6901) names: an object member or an array element.
/// `None` when it names nothing.
fn remove_pointer(value: &mut Json<'_>, pointer: &str) -> Option<()> {
    let tokens: Vec<String> = pointer
        .strip_prefix('/')?
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    let (last, parents) = tokens.split_last()?;
    let mut at = value;
    for token in parents {
        at = match at {
            Json::Object(members) => members
                .iter_mut()
                .find(|(k, _)| k == token)
                .map(|m| &mut m.1),
            Json::Array(items) => token.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
            _ => None,
        }?;
    }
    match at {
        Json::Object(members) => members.retain(|(k, _)| k != last),
        Json::Array(items) => {
            let i = last.parse::<usize>().ok().filter(|&i| i < items.len())?;
            items.remove(i);
        }
        _ => {}
    }
    Some(())
}

/// Writes the canonical form: members sorted by UTF-16 code units (RFC 8785 §3.2.3),
/// strings as serde_json writes them (the JCS escapes, §3.2.2.2), no whitespace.
fn write(value: &Json<'_>, out: &mut Vec<u8>) {
    match value {
        Json::Literal(text) => out.extend_from_slice(text.as_bytes()),
        Json::String(s) => write_string(s, out),
        Json::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, out);
            }
            out.push(b']');
        }
        Json::Object(members) => {
            let mut sorted: Vec<&(Cow<'_, str>, Json<'_>)> = members.iter().collect();
            sorted.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
            out.push(b'{');
            for (i, (name, v)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(name, out);
                out.push(b':');
                write(v, out);
            }
            out.push(b'}');
        }
    }
}

fn write_string(s: &str, out: &mut Vec<u8>) {
    // Writing a &str into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// A recursive-descent parser over text serde_json already accepted; it keeps number text
/// and finds duplicate member names, which serde_json would silently merge. Also walks
/// bodies for [`crate::redact`].
pub(crate) struct Parser<'a> {
    pub(crate) b: &'a [u8],
    text: &'a str,
    /// The byte position of the next read.
    pub(crate) i: usize,
}

impl<'a> Parser<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        Self {
            b: text.as_bytes(),
            text,
            i: 0,
        }
    }

    pub(crate) fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    pub(crate) fn value(&mut self, depth: usize) -> Option<Json<'a>> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.ws();
        match *self.b.get(self.i)? {
            b'{' => self.object(depth),
            b'[' => self.array(depth),
            b'"' => self.string().map(Json::String),
            _ => {
                let start = self.i;
                while self.i < self.b.len()
                    && !matches!(
                        self.b[self.i],
                        b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r'
                    )
                {
                    self.i += 1;
                }
                let text: &'a str = self.text;
                Some(Json::Literal(&text[start..self.i]))
            }
        }
    }

    fn object(&mut self, depth: usize) -> Option<Json<'a>> {
        let mut names = Names::default();
        self.items(b'}', |p| {
            p.ws();
            let name = p.string()?;
            names.insert(name.clone()).then_some(())?;
            p.ws();
            p.i += 1; // ':'
            Some((name, p.value(depth + 1)?))
        })
        .map(Json::Object)
    }

    fn array(&mut self, depth: usize) -> Option<Json<'a>> {
        self.items(b']', |p| p.value(depth + 1)).map(Json::Array)
    }

    /// The items `item` reads between the opening bracket at `i` and `close`, separated by
    /// commas.
    pub(crate) fn items<T>(
        &mut self,
        close: u8,
        mut item: impl FnMut(&mut Self) -> Option<T>,
    ) -> Option<Vec<T>> {
        self.i += 1;
        let mut items = Vec::new();
        self.ws();
        if self.b.get(self.i) == Some(&close) {
            self.i += 1;
            return Some(items);
        }
        loop {
            items.push(item(self)?);
            self.ws();
            let comma = *self.b.get(self.i)? == b',';
            self.i += 1; // ',' or the closing bracket
            if !comma {
                return Some(items);
            }
        }
    }

    /// Decodes a string token; escapes (including surrogate pairs) by serde_json, which
    /// rejects lone surrogates, text that no Unicode string can hold.
    pub(crate) fn string(&mut self) -> Option<Cow<'a, str>> {
        if self.b.get(self.i) != Some(&b'"') {
            return None;
        }
        let start = self.i;
        self.i += 1;
        let mut plain = true;
        loop {
            match *self.b.get(self.i)? {
                b'"' => break,
                b'\\' => {
                    plain = false;
                    self.i += 2;
                }
                _ => self.i += 1,
            }
        }
        self.i += 1;
        let text: &'a str = self.text;
        let token = &text[start..self.i];
        if plain {
            return Some(Cow::Borrowed(&token[1..token.len() - 1]));
        }
        serde_json::from_str::<String>(token).ok().map(Cow::Owned)
    }
}

/// The member names of one object seen so far: a short list for the usual small objects,
/// a hash set past 16 names.
#[derive(Default)]
struct Names<'a> {
    few: Vec<Cow<'a, str>>,
    many: HashSet<Cow<'a, str>>,
}

impl<'a> Names<'a> {
    /// Adds `name`; false if it was already there.
    fn insert(&mut self, name: Cow<'a, str>) -> bool {
        if self.many.is_empty() {
            if self.few.contains(&name) {
                return false;
            }
            if self.few.len() < 16 {
                self.few.push(name);
                return true;
            }
            self.many.extend(self.few.drain(..));
        }
        self.many.insert(name)
    }
}

#[cfg(test)]
mod tests;
