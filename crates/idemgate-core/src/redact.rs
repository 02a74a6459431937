//! What of a response is stored for replay ([`StoreResponse`]): all of it, its JSON body with
//! named values redacted, or its status and headers alone.
//!
//! The form a record holds travels with it as a stored header, [`REDACTED_HEADER`] or
//! [`BODY_OMITTED_HEADER`] (`true`), covered by the record's checksum like every stored
//! header: a reload that changes a route's setting never replays a record in another form
//! than the one it was stored in. Both names are reserved: the front doors strip them from
//! requests and never store them from an upstream's response.
//!
//! Redaction ([`redact_json`]) splices `"[redacted]"` over each value a JSON Pointer
//! (RFC 6901) names and keeps every other byte of the body as it was. A pointer token `*`
//! names every element of an array (an extension: RFC 6901 has no wildcard); in an object
//! it names the member called `*`, as RFC 6901 says.
//!
//! ```
//! use idemgate_core::redact::redact_json;
//!
//! let body = br#"{"id": "ch_1", "card": {"number": "4242"}, "keys": [{"k": 1}, {"k": 2}]}"#;
//! let out = redact_json(body, &["/card/number".into(), "/keys/*/k".into()]).unwrap();
//! assert_eq!(out, br#"{"id": "ch_1", "card": {"number": "[redacted]"}, "keys": [{"k": "[redacted]"}, {"k": "[redacted]"}]}"#);
//! ```

use std::ops::Range;

use bytes::Bytes;

use crate::canonical::Parser;
use crate::record::StoredResponse;

/// The stored header of a record whose body was redacted: `idempotent-redacted: true`.
pub const REDACTED_HEADER: &str = "idempotent-redacted";
/// The stored header of a record stored without its body: `idempotent-body-omitted: true`.
pub const BODY_OMITTED_HEADER: &str = "idempotent-body-omitted";
/// What a redacted value becomes: a JSON string.
pub const REDACTED: &[u8] = b"\"[redacted]\"";

/// Headers that describe the exact bytes of a body (an entity tag, digests, RFC 9530 and
/// RFC 1864): not stored with a body that was changed.
const BODY_BOUND: [&str; 4] = ["etag", "content-digest", "repr-digest", "content-md5"];

/// What a route stores of a response it keeps for replay. Spelled `"full"`, `"redacted"` or
/// `"status-only"` in configuration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StoreResponse {
    /// Status, kept headers and body, as the first client got them. The default.
    #[default]
    Full,
    /// As `Full`, with the values the route's `redact_json_pointers` name replaced by
    /// `"[redacted]"`; a retry gets that body and `Idempotent-Redacted: true`. A body that is
    /// not JSON (or has duplicate member names, or nests deeper than 128), is encoded
    /// (`Content-Encoding`) or whose redacted form is over the route's stored-size cap is
    /// stored as `StatusOnly`.
    Redacted,
    /// Status and kept headers, no body; a retry gets an empty body and
    /// `Idempotent-Body-Omitted: true`.
    StatusOnly,
}

impl StoreResponse {
    /// The configuration's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Redacted => "redacted",
            Self::StatusOnly => "status-only",
        }
    }
}

/// True for the names of the two reserved form headers (ASCII case-insensitive).
pub fn is_form_header(name: &str) -> bool {
    name.eq_ignore_ascii_case(REDACTED_HEADER) || name.eq_ignore_ascii_case(BODY_OMITTED_HEADER)
}

/// `response` in the stored form `form` asks for (see the module). `encoded`: the response
/// carried a `Content-Encoding` other than `identity`. A redacted body longer than
/// `max_bytes` (a value of one byte becomes twelve) is stored status-only. A response that
/// is not replayable, or stored `Full`, is returned as it is.
pub fn store_form(
    mut response: StoredResponse,
    form: StoreResponse,
    pointers: &[String],
    (encoded, max_bytes): (bool, usize),
) -> StoredResponse {
    if !response.replayable || form == StoreResponse::Full {
        return response;
    }
    let redacted = match form {
        StoreResponse::Redacted if !encoded => redact_json(&response.body, pointers),
        _ => None,
    };
    let redacted = redacted.filter(|body| body.len() <= max_bytes);
    let marker = match redacted {
        Some(body) => {
            if body != response.body {
                response.body = Bytes::from(body);
                drop_body_bound(&mut response.headers);
            }
            REDACTED_HEADER
        }
        None => {
            if !response.body.is_empty() {
                response.body = Bytes::new();
                drop_body_bound(&mut response.headers);
            }
            BODY_OMITTED_HEADER
        }
    };
    response
        .headers
        .push((marker.to_owned(), Bytes::from_static(b"true")));
    response
}

fn drop_body_bound(headers: &mut Vec<(String, Bytes)>) {
    headers.retain(|(name, _)| !BODY_BOUND.iter().any(|b| name.eq_ignore_ascii_case(b)));
}

/// `body` with each value a pointer of `pointers` names replaced by `"[redacted]"`, every
/// other byte kept; a pointer that names nothing is skipped. `None` when `body` is not
/// UTF-8 JSON with unique member names nesting at most 128 deep (the text canonical JSON
/// accepts, [`crate::canonical::canonical_json`]).
pub fn redact_json(body: &[u8], pointers: &[String]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(body).ok()?;
    serde_json::from_str::<serde::de::IgnoredAny>(text).ok()?;
    // Checks member names and depth.
    Parser::new(text).value(0)?;
    let paths: Vec<Vec<String>> = pointers.iter().filter_map(|p| tokens(p)).collect();
    let paths: Vec<&[String]> = paths.iter().map(Vec::as_slice).collect();
    let mut spans = Vec::new();
    spans_of(&mut Parser::new(text), &paths, &mut spans)?;
    spans.sort_by_key(|s| s.start);
    let mut out = Vec::with_capacity(body.len());
    let mut at = 0;
    for span in spans {
        out.extend_from_slice(&body[at..span.start]);
        out.extend_from_slice(REDACTED);
        at = span.end;
    }
    out.extend_from_slice(&body[at..]);
    Some(out)
}

/// The unescaped reference tokens of an RFC 6901 pointer; `""` (the whole text) has none.
fn tokens(pointer: &str) -> Option<Vec<String>> {
    if pointer.is_empty() {
        return Some(Vec::new());
    }
    let rest = pointer.strip_prefix('/')?;
    Some(
        rest.split('/')
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect(),
    )
}

/// Reads the value at the parser's position, adding to `spans` the byte ranges of the values
/// `paths` (token lists relative to this value) name.
fn spans_of(p: &mut Parser<'_>, paths: &[&[String]], spans: &mut Vec<Range<usize>>) -> Option<()> {
    p.ws();
    let start = p.i;
    if paths.is_empty() {
        return p.value(0).map(drop);
    }
    if paths.iter().any(|t| t.is_empty()) {
        p.value(0)?;
        spans.push(start..p.i);
        return Some(());
    }
    match *p.b.get(p.i)? {
        b'{' => {
            p.items(b'}', |p| {
                p.ws();
                let name = p.string()?;
                p.ws();
                p.i += 1; // ':'
                let next: Vec<&[String]> = paths
                    .iter()
                    .filter(|t| t[0] == *name)
                    .map(|t| &t[1..])
                    .collect();
                spans_of(p, &next, spans)
            })?;
        }
        b'[' => {
            let mut index = 0usize;
            p.items(b']', |p| {
                let i = index.to_string();
                index += 1;
                let next: Vec<&[String]> = paths
                    .iter()
                    .filter(|t| t[0] == "*" || t[0] == i)
                    .map(|t| &t[1..])
                    .collect();
                spans_of(p, &next, spans)
            })?;
        }
        _ => return p.value(0).map(drop),
    }
    Some(())
}

#[cfg(test)]
mod tests;
