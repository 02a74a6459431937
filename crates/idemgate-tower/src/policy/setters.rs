//! The `with_*` setters of [`RoutePolicy`] (a `#[non_exhaustive]` struct: built from
//! [`RoutePolicy::default`], one setter per field changed).
//!
//! ```
//! use idemgate_tower::RoutePolicy;
//!
//! let route = RoutePolicy::default().with_key_required(true).with_max_body_bytes(64 << 10);
//! assert!(route.key_required);
//! assert_eq!(route.max_body_bytes, 65536);
//! ```

use std::time::Duration;

use http::{HeaderName, StatusCode};
use idemgate_core::engine::LeaseExpiredPolicy;
use idemgate_core::lifecycle::InFlightPolicy;
use idemgate_core::redact::StoreResponse;

use super::{RoutePolicy, StatusPattern};
use crate::limits::PrincipalLimits;
use crate::path::{EncodedSlash, TrailingSlash};
use crate::principal::PrincipalSource;

/// One `with_FIELD(self, value) -> Self` per field.
macro_rules! setters {
    ($($setter:ident => $field:ident: $ty:ty,)+) => {
        impl RoutePolicy {
            $(
                #[doc = concat!("`self` with [`RoutePolicy::", stringify!($field), "`] set to `value`.")]
                #[must_use]
                pub fn $setter(mut self, value: $ty) -> Self {
                    self.$field = value;
                    self
                }
            )+
        }
    };
}

setters! {
    with_key_required => key_required: bool,
    with_record_ttl => record_ttl: Duration,
    with_lease_ttl => lease_ttl: Duration,
    with_max_lease => max_lease: Duration,
    with_mismatch_status => mismatch_status: StatusCode,
    with_store_statuses => store_statuses: Vec<StatusPattern>,
    with_release_statuses => release_statuses: Vec<StatusPattern>,
    with_fail_statuses => fail_statuses: Vec<StatusPattern>,
    with_ignore_json_pointers => ignore_json_pointers: Vec<String>,
    with_fingerprint_headers => fingerprint_headers: Vec<HeaderName>,
    with_principal => principal: PrincipalSource,
    with_allow_anonymous => allow_anonymous: bool,
    with_fail_open => fail_open: bool,
    with_lease_expired => lease_expired: LeaseExpiredPolicy,
    with_retry_failed => retry_failed: bool,
    with_max_body_bytes => max_body_bytes: usize,
    with_max_decoded_body_bytes => max_decoded_body_bytes: Option<usize>,
    with_max_stored_response_bytes => max_stored_response_bytes: usize,
    with_store_response => store_response: StoreResponse,
    with_redact_json_pointers => redact_json_pointers: Vec<String>,
    with_replay_deny_headers => replay_deny_headers: Vec<HeaderName>,
    with_limits => limits: PrincipalLimits,
    with_record_ttl_header => record_ttl_header: bool,
    with_in_flight_retry_after => in_flight_retry_after: Duration,
    with_on_in_flight => on_in_flight: InFlightPolicy,
    with_max_wait => max_wait: Duration,
    with_trailing_slash => trailing_slash: TrailingSlash,
    with_encoded_slash => encoded_slash: EncodedSlash,
    with_case_insensitive => case_insensitive: bool,
}
