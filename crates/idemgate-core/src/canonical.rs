//! Lossless canonical JSON: RFC 8785 (JCS), or nothing.
//!
//! [`canonical_json`] returns the RFC 8785 canonical form of a JSON text only when that form
//! loses nothing an upstream could read: the text must be valid UTF-8 JSON, member names must
//! be unique within each object (after unescaping, so `"\u00e9"` and `"é"` are the same name),
//! and every number must round-trip through an IEEE-754 double (`9007199254740993` and
//! `0.30000000000000001` do not). Otherwise it returns `None` and the caller hashes the raw
//! bytes instead (DESIGN.md, "Fingerprint safety").
//!
//! ```
//! use idemgate_core::canonical::canonical_json;
//!
//! let a = canonical_json(br#"{ "b": 2, "a": 1.50 }"#, &[]).unwrap();
//! assert_eq!(a, br#"{"a":1.5,"b":2}"#);
//! assert_eq!(canonical_json(br#"{"a":1,"a":2}"#, &[]), None);
//! assert_eq!(canonical_json(b"9007199254740993", &[]), None);
//! ```

use std::borrow::Cow;
use std::collections::HashSet;

use serde_json::Value;

/// Deepest nesting accepted (serde_json's own recursion limit). Deeper texts are hashed raw.
const MAX_DEPTH: usize = 128;

/// Canonicalizes `body` with RFC 8785 after removing the members named by `ignore`
/// (RFC 6901 JSON Pointers; a pointer that names nothing is skipped).
///
/// Returns `None` when the text cannot be canonicalized without loss (see the module docs).
pub fn canonical_json(body: &[u8], ignore: &[String]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(body).ok()?;
    let mut scanner = Scanner {
        b: text.as_bytes(),
        text,
        i: 0,
    };
    scanner.value(0)?;
    scanner.ws();
    if scanner.i != scanner.b.len() {
        return None;
    }
    let mut value: Value = serde_json::from_str(text).ok()?;
    for pointer in ignore {
        remove_pointer(&mut value, pointer);
    }
    serde_json_canonicalizer::to_vec(&value).ok()
}

/// Plain RFC 8785: parses `body` as I-JSON (numbers as IEEE-754 doubles, the last of
/// duplicate names wins) and writes its canonical form. Unlike [`canonical_json`] it accepts
/// lossy texts, so it is not safe for fingerprints on its own: `333333333.33333329` and
/// `333333333.3333333` share one form here.
pub fn jcs(body: &[u8]) -> Option<Vec<u8>> {
    let value: Value = serde_json::from_slice(body).ok()?;
    serde_json_canonicalizer::to_vec(&value).ok()
}

/// Removes the value a JSON Pointer (RFC 6901) names: an object member or an array element.
fn remove_pointer(value: &mut Value, pointer: &str) {
    let Some((parent, last)) = pointer.rsplit_once('/') else {
        return;
    };
    let last = last.replace("~1", "/").replace("~0", "~");
    match value.pointer_mut(parent) {
        Some(Value::Object(map)) => {
            map.remove(&last);
        }
        Some(Value::Array(items)) => {
            if let Ok(index) = last.parse::<usize>() {
                if index < items.len() {
                    items.remove(index);
                }
            }
        }
        _ => {}
    }
}

/// A syntax walk that finds what serde_json would silently accept with loss: duplicate
/// member names and numbers a double cannot hold. serde_json validates everything else.
struct Scanner<'a> {
    b: &'a [u8],
    text: &'a str,
    i: usize,
}

impl<'a> Scanner<'a> {
    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn value(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.ws();
        match *self.b.get(self.i)? {
            b'{' => self.object(depth),
            b'[' => self.array(depth),
            b'"' => self.string().map(drop),
            b'-' | b'0'..=b'9' => self.number(),
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            _ => None,
        }
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        self.b[self.i..].starts_with(word.as_bytes()).then(|| {
            self.i += word.len();
        })
    }

    fn object(&mut self, depth: usize) -> Option<()> {
        self.i += 1;
        let mut names = Names::default();
        self.ws();
        if self.b.get(self.i) == Some(&b'}') {
            self.i += 1;
            return Some(());
        }
        loop {
            self.ws();
            if self.b.get(self.i) != Some(&b'"') {
                return None;
            }
            let name = self.string()?;
            if !names.insert(name) {
                return None;
            }
            self.ws();
            if self.b.get(self.i) != Some(&b':') {
                return None;
            }
            self.i += 1;
            self.value(depth + 1)?;
            self.ws();
            match self.b.get(self.i)? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        self.i += 1;
        self.ws();
        if self.b.get(self.i) == Some(&b']') {
            self.i += 1;
            return Some(());
        }
        loop {
            self.value(depth + 1)?;
            self.ws();
            match self.b.get(self.i)? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Decodes a string token; escapes (including surrogate pairs) by serde_json, which
    /// rejects lone surrogates, text that no Unicode string can hold.
    fn string(&mut self) -> Option<Cow<'a, str>> {
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

    fn number(&mut self) -> Option<()> {
        let start = self.i;
        while self.i < self.b.len()
            && matches!(
                self.b[self.i],
                b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'
            )
        {
            self.i += 1;
        }
        let token = &self.text[start..self.i];
        // Fast path: without an exponent, at most 15 significant digits (DBL_DIG) always
        // survive a double and come back as the same decimal.
        if !token.contains(['e', 'E']) && token.bytes().filter(u8::is_ascii_digit).count() <= 15 {
            return Some(());
        }
        let double: f64 = token.parse().ok()?;
        if !double.is_finite() {
            return None;
        }
        (decimal_value(token)? == decimal_value(&format!("{double:e}"))?).then_some(())
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

/// A decimal number as (negative, significant digits, exponent): the value is
/// `digits × 10^exponent`, digits without leading or trailing zeros. Zero is `(false, "", 0)`.
fn decimal_value(text: &str) -> Option<(bool, String, i64)> {
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(at) => (&text[..at], text[at + 1..].parse::<i64>().ok()?),
        None => (text, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut digits: String = int.chars().chain(frac.chars()).collect();
    let mut exponent = exponent.checked_sub(i64::try_from(frac.len()).ok()?)?;
    let trailing = digits.len() - digits.trim_end_matches('0').len();
    digits.truncate(digits.len() - trailing);
    exponent = exponent.checked_add(i64::try_from(trailing).ok()?)?;
    let digits = digits.trim_start_matches('0').to_owned();
    if digits.is_empty() {
        return Some((false, digits, 0));
    }
    Some((negative, digits, exponent))
}

#[cfg(test)]
mod tests;
