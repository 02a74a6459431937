//! How each [`RoutePolicy`](super::RoutePolicy) field reads from its configuration spelling
//! (`"24h"`, `"5xx"`, `"set-cookie"`, `"/client_ts"`); an error names the value
//! and what is accepted.

use std::time::Duration;

use http::{HeaderName, StatusCode};
use idemgate_core::status::StatusPattern;
use serde::de::{Deserialize, Deserializer, Error};

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
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|s| parse(s).map_err(D::Error::custom))
        .collect()
}

/// A humantime duration: `"10s"`, `"24h"`, `"250ms"`.
pub(super) fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    parsed(d, |v| {
        humantime::parse_duration(v)
            .map_err(|e| format!("`{v}` is not a duration like \"10s\" or \"24h\" ({e})"))
    })
}

/// `422` or `400`.
pub(super) fn mismatch_status<'de, D: Deserializer<'de>>(d: D) -> Result<StatusCode, D::Error> {
    match u16::deserialize(d)? {
        422 => Ok(StatusCode::UNPROCESSABLE_ENTITY),
        400 => Ok(StatusCode::BAD_REQUEST),
        other => Err(D::Error::custom(format!("{other} is not 422 or 400"))),
    }
}

/// Status codes and classes: `["2xx", "409"]`.
pub(super) fn statuses<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<StatusPattern>, D::Error> {
    each(d, StatusPattern::parse)
}

/// Header names: `["set-cookie"]`.
pub(super) fn headers<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<HeaderName>, D::Error> {
    each(d, |h| {
        HeaderName::from_bytes(h.as_bytes()).map_err(|_| format!("`{h}` is not a header name"))
    })
}

/// JSON Pointers (RFC 6901): `["/client_ts"]`.
pub(super) fn pointers<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    each(d, |p| match p.starts_with('/') {
        true => Ok(p.to_owned()),
        false => Err(format!(
            "`{p}` is not a JSON Pointer (RFC 6901), e.g. \"/client_ts\""
        )),
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
