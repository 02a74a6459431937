//! Replays: which response headers are stored, and the response a retry gets back.

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Response, StatusCode};
use idemgate_core::StoredResponse;

use crate::body::{full, BoxBody};

/// `Idempotent-Replayed: true` marks a replay (the Stripe convention).
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// `Idempotent-Takeover: true` tells the upstream that this request took over a record
/// whose earlier attempt may have run (its lease lapsed), so it can check before acting.
/// Reserved: stripped from every incoming request, set only by idemgate.
pub const IDEMPOTENT_TAKEOVER: HeaderName = HeaderName::from_static("idempotent-takeover");

/// `Idempotent-Resolved`: the audit entry of a record an operator resolved (`idemgate
/// resolve`), kept with the stored response. Reserved: never stored from an upstream's
/// response, never replayed.
pub const IDEMPOTENT_RESOLVED: HeaderName =
    HeaderName::from_static(idemgate_core::admin::RESOLVED_HEADER);

/// `Idempotent-Resolved-Detail`: the operator's text of a record resolved as not
/// replayable, given to retries in the `410`. Reserved like [`IDEMPOTENT_RESOLVED`].
pub const IDEMPOTENT_RESOLVED_DETAIL: HeaderName =
    HeaderName::from_static(idemgate_core::admin::RESOLVED_DETAIL_HEADER);

/// `Idempotency-Key-Lifetime: 86400`: the route's record TTL in whole seconds (how long
/// retries with this key get the stored response, counted from the key's first request), on
/// fresh and replayed keyed responses of routes with
/// [`RoutePolicy::record_ttl_header`](crate::RoutePolicy::record_ttl_header). The value is
/// delta-seconds like `Retry-After` (RFC 9110 §10.2.3); the Iceberg REST catalog publishes
/// the same fact as `idempotency-key-lifetime` in ISO 8601 in its configuration.
pub const IDEMPOTENCY_KEY_LIFETIME: HeaderName =
    HeaderName::from_static("idempotency-key-lifetime");

/// [`IDEMPOTENCY_KEY_LIFETIME`] as API descriptions spell it.
pub const IDEMPOTENCY_KEY_LIFETIME_TITLE: &str = "Idempotency-Key-Lifetime";

/// Adds [`IDEMPOTENCY_KEY_LIFETIME`] to a keyed response (fresh or replayed) whose status the
/// route stores; called for routes that send it.
pub(crate) fn add_key_lifetime<E>(
    route: &crate::RoutePolicy,
    outcome: &str,
    response: &mut Result<Response<crate::body::BoxBody>, E>,
) {
    let keyed = matches!(outcome, "acquired" | "takeover" | "replayed");
    let Ok(response) = response else { return };
    let action = route.action_for(response.status(), response.headers());
    if keyed && action == crate::StatusAction::Store {
        let secs = route.record_ttl.as_secs().max(1);
        response
            .headers_mut()
            .insert(IDEMPOTENCY_KEY_LIFETIME, HeaderValue::from(secs));
    }
}

/// `Idempotent-Redacted: true` marks a replay of a body stored with values redacted
/// ([`StoreResponse::Redacted`](idemgate_core::redact::StoreResponse::Redacted)). Reserved:
/// stripped from every incoming request, never stored from an upstream's response.
pub const IDEMPOTENT_REDACTED: HeaderName =
    HeaderName::from_static(idemgate_core::redact::REDACTED_HEADER);

/// `Idempotent-Body-Omitted: true` marks a replay of a response stored without its body
/// ([`StoreResponse::StatusOnly`](idemgate_core::redact::StoreResponse::StatusOnly)).
/// Reserved like [`IDEMPOTENT_REDACTED`].
pub const IDEMPOTENT_BODY_OMITTED: HeaderName =
    HeaderName::from_static(idemgate_core::redact::BODY_OMITTED_HEADER);

/// Hop-by-hop headers (RFC 9110 §7.6.1): never stored, replayed or forwarded by a proxy.
pub const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// The header names the `Connection` fields of `headers` list (RFC 9110 §7.6.1): those
/// fields are hop-by-hop too. Tokens that are not valid field names are skipped.
///
/// Split as bytes: a field with a byte outside visible ASCII (obs-text) still has its valid
/// tokens removed; only the invalid ones are skipped.
pub fn connection_tokens(headers: &HeaderMap) -> Vec<HeaderName> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .filter_map(|t| HeaderName::from_bytes(t.trim_ascii()).ok())
        .collect()
}

/// Headers no replay carries, whatever a record holds: framing (`content-length`,
/// recomputed, and the hop-by-hop ones, RFC 9110 §7.6.1), `set-cookie`, `date` (fresh) and
/// the reserved `Idempotent-*` headers. A record written by an older build or through a
/// store's own API may hold them; they are dropped, never sent.
fn never_replayed(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(name)
        || *name == header::CONTENT_LENGTH
        || *name == IDEMPOTENT_REPLAYED
        || *name == IDEMPOTENT_TAKEOVER
        || *name == IDEMPOTENT_RESOLVED
        || *name == IDEMPOTENT_RESOLVED_DETAIL
        || *name == header::SET_COOKIE
        || *name == header::DATE
}

/// Removes the reserved `Idempotent-*` headers an upstream sent (only idemgate says a
/// response is a replay, a takeover, redacted or resolved): the first client never gets
/// them from the upstream. One pass over the names when there are none.
pub(crate) fn strip_reserved(headers: &mut HeaderMap) {
    if !headers
        .keys()
        .any(|n| n.as_str().starts_with("idempotent-"))
    {
        return;
    }
    for name in [
        IDEMPOTENT_REPLAYED,
        IDEMPOTENT_TAKEOVER,
        IDEMPOTENT_REDACTED,
        IDEMPOTENT_BODY_OMITTED,
        IDEMPOTENT_RESOLVED,
        IDEMPOTENT_RESOLVED_DETAIL,
    ] {
        headers.remove(name);
    }
}

/// The response headers kept for replay: all but hop-by-hop ones, `content-length`,
/// `set-cookie`, `date` and the reserved `Idempotent-*` headers (never replayed, whatever
/// the configuration says; the stored form's marker is idemgate's own) and the `deny` list,
/// in order.
pub fn headers_to_store(headers: &HeaderMap, deny: &[HeaderName]) -> Vec<(String, Bytes)> {
    // Hop-by-hop too: the headers `Connection` names.
    let connection = connection_tokens(headers);
    let dropped = |n: &HeaderName| {
        never_replayed(n)
            || *n == IDEMPOTENT_REDACTED
            || *n == IDEMPOTENT_BODY_OMITTED
            || connection.contains(n)
            || deny.contains(n)
    };
    headers
        .iter()
        .filter(|(name, _)| !dropped(name))
        .map(|(n, v)| (n.as_str().to_owned(), Bytes::copy_from_slice(v.as_bytes())))
        .collect()
}

/// A stored response that cannot be replayed as HTTP: a status or header that is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stored response is not valid HTTP: {0}")]
pub struct NotReplayable(pub &'static str);

/// A replay of `stored`: its status, headers (with the stored form's marker,
/// `Idempotent-Redacted` or `Idempotent-Body-Omitted`, where it has one) and body, a fresh
/// `Date`, a recomputed `Content-Length` and `Idempotent-Replayed: true`. Stored framing, hop-by-hop,
/// `Set-Cookie`, `Date` and `Idempotent-*` headers are dropped.
///
/// # Errors
/// [`NotReplayable`] when the stored status or a stored header is not valid HTTP: the
/// record is damaged and is never replayed in part.
pub fn replay(stored: &StoredResponse) -> Result<Response<BoxBody>, NotReplayable> {
    let status = StatusCode::from_u16(stored.status)
        .ok()
        .filter(|s| idemgate_core::integrity::is_storable_status(s.as_u16()))
        .ok_or(NotReplayable("status"))?;
    let mut resp = Response::new(full(stored.body.clone()));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    for (name, value) in &stored.headers {
        let n =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| NotReplayable("header name"))?;
        let v = HeaderValue::from_bytes(value).map_err(|_| NotReplayable("header value"))?;
        if !never_replayed(&n) {
            headers.append(n, v);
        }
    }
    headers.insert(header::DATE, date_now());
    headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    Ok(resp)
}

fn date_now() -> HeaderValue {
    HeaderValue::from_str(&httpdate::fmt_http_date(std::time::SystemTime::now()))
        .unwrap_or_else(|_| HeaderValue::from_static(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(headers: &[(&str, &str)]) -> StoredResponse {
        StoredResponse {
            status: 201,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), Bytes::copy_from_slice(v.as_bytes())))
                .collect(),
            body: Bytes::from_static(b"{\"id\":1}"),
            replayable: true,
            sealed_by: None,
        }
    }

    #[test]
    fn framing_and_hop_by_hop_headers_of_a_record_are_never_replayed() {
        let record = stored(&[
            ("transfer-encoding", "chunked"),
            ("content-length", "1000"),
            ("connection", "close"),
            ("set-cookie", "session=other"),
            ("date", "Mon, 01 Jan 2001 00:00:00 GMT"),
            ("idempotent-takeover", "true"),
            ("idempotent-resolved", "{\"by\":\"ops\"}"),
            ("idempotent-resolved-detail", "see ticket"),
            ("location", "/payments/1"),
        ]);
        let resp = replay(&record).expect("valid");
        let h = resp.headers();
        for name in [
            "transfer-encoding",
            "content-length",
            "connection",
            "set-cookie",
        ] {
            assert!(h.get(name).is_none(), "{name} was replayed");
        }
        for name in [
            "idempotent-takeover",
            "idempotent-resolved",
            "idempotent-resolved-detail",
        ] {
            assert!(h.get(name).is_none(), "{name} was replayed");
        }
        assert_ne!(h[header::DATE], "Mon, 01 Jan 2001 00:00:00 GMT");
        assert_eq!(h[header::LOCATION], "/payments/1");
        assert_eq!(h[IDEMPOTENT_REPLAYED], "true");
    }

    #[test]
    fn an_upstream_cannot_store_the_operators_reserved_headers() {
        let mut upstream = HeaderMap::new();
        upstream.insert(IDEMPOTENT_RESOLVED, HeaderValue::from_static("{}"));
        upstream.insert(IDEMPOTENT_RESOLVED_DETAIL, HeaderValue::from_static("x"));
        upstream.insert(header::LOCATION, HeaderValue::from_static("/payments/1"));
        let kept = headers_to_store(&upstream, &[]);
        let names: Vec<&str> = kept.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["location"]);
    }
}
