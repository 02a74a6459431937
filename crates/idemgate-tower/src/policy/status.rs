//! Status patterns of the route settings (`store_statuses`, ...) and what a status does to
//! the record: the core's rules ([`idemgate_core::status`]), where each default is
//! documented with its reason.

use http::HeaderMap;

pub use idemgate_core::status::{StatusAction, StatusPattern, StatusRules};

/// True when `headers` carry an authentication challenge: a `WWW-Authenticate` field with
/// a value (RFC 9110 §11.6.1), what [`StatusRules::action`] calls `challenge`.
pub(crate) fn has_challenge(headers: &HeaderMap) -> bool {
    headers
        .get_all(http::header::WWW_AUTHENTICATE)
        .iter()
        .any(|v| !v.as_bytes().trim_ascii().is_empty())
}
