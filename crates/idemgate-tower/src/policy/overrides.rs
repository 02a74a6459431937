//! Request headers that make some upstream run another path or method than the request line
//! names ([`Policy::override_headers`]).
//!
//! idemgate scopes a request by its method and path; an upstream that reads one of these
//! headers executes another (method, path), so the gateway's scope and the operation that
//! runs part ways: `POST /x/charges` with `SCRIPT_NAME: /x` is a scope of its own to the
//! gateway, while gunicorn runs `POST /charges` — a second charge for a retried key, and a
//! way around `key_required`. A covered request carrying one of them is refused with `400
//! ambiguous-request`, with or without a key.
//!
//! ```
//! use http::{HeaderMap, HeaderValue};
//! use idemgate_tower::Policy;
//!
//! let policy = Policy::default();
//! let mut headers = HeaderMap::new();
//! assert_eq!(policy.override_header(&headers), None);
//! headers.insert("x-http-method-override", HeaderValue::from_static("PATCH"));
//! assert_eq!(policy.override_header(&headers).unwrap(), "x-http-method-override");
//! ```

use http::{HeaderMap, HeaderName};

use super::Policy;

/// The headers [`Policy::override_headers`] holds by default, in lower case, and who reads
/// them:
///
/// - `script_name`: gunicorn (and other WSGI servers) take it from a peer listed in
///   `forwarded_allow_ips` (by default `127.0.0.1`, i.e. a gateway on the same host) and
///   strip it from the path before routing (`/x/charges` runs as `/charges`);
/// - `path_info`: gunicorn's `forwarder_headers` default (`SCRIPT_NAME,PATH_INFO`) lets it
///   through to the WSGI environment, where a WSGI/CGI application may route by it;
/// - `x-original-url`, `x-rewrite-url`: the path as set by IIS URL Rewrite, which older
///   Symfony (before 2.7.49, 3.4.14, 4.1.3) and Zend Framework routed by instead of the
///   request line;
/// - `x-http-method-override`: Express's `method-override`, Rails (`Rack::MethodOverride`),
///   Laravel and Symfony (`http_method_override`), Google APIs: a `POST` runs as the named
///   method;
/// - `x-http-method`: ASP.NET Web API and OData;
/// - `x-method-override`: Express's `method-override` (configurable) and Google APIs.
///
/// Not listed: `X-Forwarded-Prefix` (Spring's `ForwardedHeaderFilter`, Werkzeug's
/// `ProxyFix`) sets the prefix of generated URLs (the context path or `SCRIPT_NAME`) but
/// leaves the path the router matches unchanged.
pub const DEFAULT_OVERRIDE_HEADERS: [&str; 7] = [
    "script_name",
    "path_info",
    "x-original-url",
    "x-rewrite-url",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

impl Policy {
    /// The first of [`Policy::override_headers`] that `headers` carries, if any: a covered
    /// request carrying it is refused with `400 ambiguous-request`
    /// ([`IdempotencyRejection::OverrideHeader`](crate::IdempotencyRejection::OverrideHeader)).
    pub fn override_header(&self, headers: &HeaderMap) -> Option<&HeaderName> {
        self.override_headers
            .iter()
            .find(|name| headers.contains_key(*name))
    }
}
