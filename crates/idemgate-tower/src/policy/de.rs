//! How each [`RoutePolicy`](super::RoutePolicy) field reads from its configuration spelling
//! (`"24h"`, `"5xx"`, `"set-cookie"`, `"/client_ts"`); an error names the value
//! and what is accepted. The fields of other types than their spelling read through a module
//! (`#[serde(with)]`) that writes them back so (the configuration reference shows each
//! default that way).

use std::time::Duration;

use http::{HeaderName, StatusCode};
use idemgate_core::status::StatusPattern;
use serde::de::{Deserialize, Deserializer, Error};
use serde::Serializer;

/// Maps a string setting through `parse`, its error as the message.
fn parsed<'de, D: Deserializer<'de>, T>(
    d: D,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<T, D::Error> {
    parse(&String::deserialize(d)?).map_err(D::Error::custom)
}

/// Maps each string of a list through `parse`.
fn each<'de, D: Deserializer<'de>, T>(
    d: D,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, D::Error> {
    // Every bad entry is named, not only the first.
    let (mut parsed, mut bad) = (Vec::new(), Vec::new());
    for s in Vec::<String>::deserialize(d)? {
        match parse(&s) {
            Ok(v) => parsed.push(v),
            Err(e) => bad.push(e),
        }
    }
    match bad.is_empty() {
        true => Ok(parsed),
        false => Err(D::Error::custom(bad.join("; "))),
    }
}

/// A humantime duration: `"10s"`, `"24h"`, `"250ms"`; written as whole hours (`"24h"`),
/// whole seconds (`"10s"`) or else humantime's spelling.
pub(super) mod duration {
    use super::*;

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        parsed(d, |v| {
            humantime::parse_duration(v)
                .map_err(|e| format!("`{v}` is not a duration like \"10s\" or \"24h\" ({e})"))
        })
    }

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        match (d.as_secs(), d.subsec_nanos()) {
            (h @ 1.., 0) if h % 3600 == 0 => s.collect_str(&format_args!("{}h", h / 3600)),
            (secs, 0) => s.collect_str(&format_args!("{secs}s")),
            _ => s.collect_str(&humantime::format_duration(*d)),
        }
    }
}

/// `422` or `400`.
pub(super) mod mismatch_status {
    use super::*;

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<StatusCode, D::Error> {
        match u16::deserialize(d)? {
            422 => Ok(StatusCode::UNPROCESSABLE_ENTITY),
            400 => Ok(StatusCode::BAD_REQUEST),
            other => Err(D::Error::custom(format!("{other} is not 422 or 400"))),
        }
    }

    pub(crate) fn serialize<S: Serializer>(code: &StatusCode, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u16(code.as_u16())
    }
}

/// Status codes and classes: `["2xx", "409"]`.
pub(super) mod statuses {
    use super::*;

    pub(crate) fn deserialize<'de, D>(d: D) -> Result<Vec<StatusPattern>, D::Error>
    where
        D: Deserializer<'de>,
    {
        each(d, StatusPattern::parse)
    }

    pub(crate) fn serialize<S: Serializer>(v: &[StatusPattern], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|p| match p {
            StatusPattern::Exact(n) => n.to_string(),
            StatusPattern::Class(c) => format!("{c}xx"),
        }))
    }
}

/// Header names: `["set-cookie"]`.
pub(super) mod headers {
    use super::*;

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<HeaderName>, D::Error> {
        each(d, |h| {
            HeaderName::from_bytes(h.as_bytes()).map_err(|_| format!("`{h}` is not a header name"))
        })
    }

    pub(crate) fn serialize<S: Serializer>(v: &[HeaderName], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(HeaderName::as_str))
    }
}

/// JSON Pointers (RFC 6901): `["/client_ts"]`.
pub(super) fn pointers<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    each(d, |p| {
        if p.is_empty() {
            return Err("`\"\"` names the whole body, which is not allowed here; name a member, e.g. \"/client_ts\"".into());
        }
        // RFC 6901 §3: `~` only as `~0` (a `~`) or `~1` (a `/`).
        let bad_escape = p.split('~').skip(1).any(|t| !t.starts_with(['0', '1']));
        match p.starts_with('/') && !bad_escape {
            true => Ok(p.to_owned()),
            false if bad_escape => Err(format!(
                "`{p}` is not a JSON Pointer (RFC 6901): `~` is written only as `~0` (a `~`) or `~1` (a `/`)"
            )),
            false => Err(format!(
                "`{p}` is not a JSON Pointer (RFC 6901), e.g. \"/client_ts\""
            )),
        }
    })
}

/// A decoded-size limit of at least one byte.
pub(super) fn decoded_limit<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    match usize::deserialize(d)? {
        0 => Err(D::Error::custom("must be at least 1")),
        n => Ok(Some(n)),
    }
}

/// A stored-response limit every store keeps.
pub(super) fn stored_limit<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let max = idemgate_core::integrity::MAX_STORED_RESPONSE_BYTES;
    match usize::deserialize(d)? {
        n if n > max => Err(D::Error::custom(format!(
            "at most {max} (256 MiB), the largest response every store keeps"
        ))),
        n => Ok(n),
    }
}
