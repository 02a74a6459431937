//! The reverse proxy the idempotency layer wraps: forwards to the upstream over a pooled
//! HTTP/1.1 hyper client (whatever version the client spoke, HTTP/2 included: see
//! `to_http11`), strips hop-by-hop headers, adds `X-Forwarded-*`, and classifies failures
//! (an error the client raised before sending the request is [`NotSent`], so the key is
//! released).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ConnectInfo;
use futures_util::future::BoxFuture;
use http::header::{HeaderName, HeaderValue, COOKIE, HOST};
use http::{HeaderMap, Request, Response, Uri, Version};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::{Connect, HttpConnector};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idemgate_core::BoxError;
use idemgate_tower::body::BoxBody;
use idemgate_tower::replay::{connection_tokens, HOP_BY_HOP};
use idemgate_tower::NotSent;
use idemgate_tower::IDEMPOTENT_REPLAYED;

/// The upstream did not send response headers within the configured timeout. The request
/// was sent, so the operation may have run.
#[derive(Debug, thiserror::Error)]
#[error("the upstream did not answer within {0:?}")]
pub struct UpstreamTimeout(pub Duration);

/// The upstream's response head had more header fields than `max_response_headers` (or was
/// larger than the parser's buffer, about 400 KB). The request was sent, so the operation
/// may have run.
#[derive(Debug, thiserror::Error)]
#[error("the upstream's response head is too large (over {0} header fields, or over the parser's buffer)")]
pub struct UpstreamHeadTooLarge(pub usize);

/// The upstream answered `101 Switching Protocols` to a request that asked for no upgrade
/// (the gateway strips `Upgrade`; RFC 9110 §15.2.2 allows a switch only to a protocol the
/// request named). The request was sent, so the operation may have run: answered as a
/// failed upstream (`502`), the key marked failed.
#[derive(Debug, thiserror::Error)]
#[error("the upstream switched protocols (101) although the request asked for no upgrade")]
pub struct UnsolicitedUpgrade;

/// The rejection for an error of [`Proxy`]: `504` after [`UpstreamTimeout`], `502`
/// otherwise, as unreachable when nothing was sent ([`idemgate_tower::NotSent`]), as a
/// head too large ([`UpstreamHeadTooLarge`]), or as failed.
pub fn upstream_rejection(e: &BoxError) -> idemgate_tower::IdempotencyRejection {
    use idemgate_tower::IdempotencyRejection as Rejection;
    if e.is::<UpstreamTimeout>() {
        Rejection::UpstreamTimeout
    } else if e.is::<idemgate_tower::NotSent>() {
        Rejection::UpstreamUnreachable
    } else if e.is::<UpstreamHeadTooLarge>() {
        Rejection::UpstreamHeadTooLarge
    } else {
        Rejection::UpstreamFailed
    }
}

/// A `tower::Service` that forwards requests to one upstream base URL, over connections
/// that `C` opens: TCP, and TLS for an `https://` upstream, unless another connector is
/// given ([`Proxy::with_connector`]: the deterministic simulation's in-memory one). Generic
/// rather than boxed, so the gateway's proxy compiles to what it was.
///
/// A clone is a pointer and a flag (16 bytes): every request's futures hold one, the
/// detached task's among them, for as long as the upstream takes.
#[derive(Clone, Debug)]
pub struct Proxy<C = HttpsConnector<HttpConnector>> {
    upstream: Arc<Upstream<C>>,
    /// Whether the gateway's listener serves TLS: the `X-Forwarded-Proto` sent.
    https: bool,
}

/// What a [`Proxy`] forwards with, shared by its clones.
#[derive(Debug)]
struct Upstream<C> {
    client: Client<C, BoxBody>,
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
    base_path: String,
    timeout: Duration,
    max_headers: usize,
    /// The `Host` sent upstream, as hyper-util's client would write it for every request.
    host: HeaderValue,
}

impl Proxy {
    /// A proxy to `upstream` (`http://host:port[/prefix]` or `https://...`); `timeout`
    /// bounds the wait for response headers; a response with more than `max_headers` header
    /// fields (HTTP/1.1) is an [`UpstreamHeadTooLarge`] error (hyper's default would be 100).
    /// An `https://` upstream is checked against the roots of `tls` (see
    /// [`crate::tls::client_config`]); `None` trusts no root. A failed TLS handshake is a
    /// connect error: nothing was sent ([`NotSent`]).
    pub fn new(
        upstream: &Uri,
        timeout: Duration,
        max_headers: usize,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Self {
        let tls = tls.unwrap_or_else(|| {
            crate::tls::trusting(rustls::RootCertStore::empty())
                .expect("ring supports the default protocol versions")
        });
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(Duration::from_secs(5)));
        http.enforce_http(false);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*tls).clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Self::with_connector(upstream, timeout, max_headers, connector)
    }
}

impl<C: Connect + Clone + Send + Sync + 'static> Proxy<C> {
    /// [`Proxy::new`] over connections `connector` opens instead of TCP (and TLS): the
    /// same pool, timeouts and limits. A connector's error is a connect error: nothing was
    /// sent ([`NotSent`]).
    pub fn with_connector(
        upstream: &Uri,
        timeout: Duration,
        max_headers: usize,
        connector: C,
    ) -> Self {
        // An idle upstream connection holds about 27 KB (hyper's read and write buffers, 8 KB
        // each, its request channel, its task): after a burst of 3,000 requests, 256 of them
        // kept 7 MB for a minute; 64 cover a steady load of as many requests at once, since a
        // busy pool's connections are taken again as soon as they are put back.
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(64)
            .http1_max_headers(max_headers)
            .build(connector);
        let (scheme, authority) = (upstream.scheme().cloned(), upstream.authority().cloned());
        let scheme = scheme.unwrap_or(http::uri::Scheme::HTTP);
        let authority = authority.expect("validated upstream has a host");
        let upstream = Upstream {
            client,
            host: upstream_host(&scheme, &authority),
            scheme,
            authority,
            base_path: upstream.path().trim_end_matches('/').into(),
            timeout,
            max_headers,
        };
        Self {
            upstream: Arc::new(upstream),
            https: false,
        }
    }

    /// The `X-Forwarded-Proto` sent upstream: `https` when the gateway listener serves TLS.
    #[must_use]
    pub fn forwarded_proto(mut self, https: bool) -> Self {
        self.https = https;
        self
    }
}

impl<C> Upstream<C> {
    /// The URI sent upstream: the upstream's scheme and authority, its base path, then the
    /// request's path and query. The path is always a copy of its own: hyper-util's client
    /// keeps a clone of this URI until the response comes (to resend an unstarted request),
    /// and a clone of the request's would keep alive the whole 8 KiB read buffer hyper parsed
    /// the request head from, while hyper reads the connection into another.
    fn upstream_uri(&self, uri: &Uri) -> Result<Uri, http::Error> {
        let pq = uri.path_and_query().map_or("/", |pq| pq.as_str());
        let path_and_query: http::uri::PathAndQuery = if self.base_path.is_empty() {
            pq.try_into()?
        } else {
            format!("{}{pq}", self.base_path).try_into()?
        };
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path_and_query)
            .build()
    }
}

/// Removes hop-by-hop headers (RFC 9110 §7.6.1), including those `Connection` names.
///
/// One pass over the names present (a handful, usually none of them hop-by-hop) instead of
/// a hashed removal per hop-by-hop name: 3.8k of the 87k instructions a proxied request
/// cost before.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let mut present: Vec<HeaderName> = headers
        .keys()
        .filter(|name| HOP_BY_HOP.contains(name))
        .cloned()
        .collect();
    if present.contains(&http::header::CONNECTION) {
        present.extend(connection_tokens(headers));
    }
    for name in present {
        headers.remove(name);
    }
}

/// Readies a request of any version for the HTTP/1.1 upstream client (which refuses any
/// other with `UserUnsupportedVersion`): a proxy forwards with its own version (RFC 9110
/// §6.2). From HTTP/2, the pseudo-header fields never reach the header map, hyper's server
/// already refuses connection-specific fields (RFC 9113 §8.2.2; [`strip_hop_by_hop`] drops
/// any left), the `:authority` becomes the `Host` when there is none (§8.3.1), and `cookie`
/// fields split for compression are joined with `; ` (§8.2.3).
fn to_http11<B>(req: &mut Request<B>) {
    if req.version() == Version::HTTP_2 {
        let authority = req.uri().authority().map(|a| a.as_str().to_owned());
        let host = authority.and_then(|a| HeaderValue::from_str(&a).ok());
        if let (false, Some(host)) = (req.headers().contains_key(HOST), host) {
            req.headers_mut().insert(HOST, host);
        }
        join_cookies(req.headers_mut());
    }
    *req.version_mut() = Version::HTTP_11;
}

/// Joins several `cookie` fields into one (RFC 9113 §8.2.3), as HTTP/1.1 requires.
fn join_cookies(headers: &mut HeaderMap) {
    if headers.get_all(COOKIE).iter().nth(1).is_none() {
        return;
    }
    let values = headers.get_all(COOKIE);
    let values: Vec<&[u8]> = values.iter().map(HeaderValue::as_bytes).collect();
    let joined = values.join(&b"; "[..]);
    if let Ok(v) = HeaderValue::from_bytes(&joined) {
        headers.insert(COOKIE, v);
    }
}

/// True when the client failed before the request left it, so the operation cannot have
/// run: no connection (`is_connect`), a request it refuses to send (an unsupported version
/// or method, a URI without authority), or one handed back unsent (`Canceled`: hyper
/// returns the request only if it was never written, and hyper-util retries it once).
/// hyper-util exposes only `is_connect`, so the others are read from its `Display`
/// (`client error (Kind)`).
fn not_sent(e: &hyper_util::client::legacy::Error) -> bool {
    const UNSENT: [&str; 4] = [
        "client error (UserUnsupportedVersion)",
        "client error (UserUnsupportedRequestMethod)",
        "client error (UserAbsoluteUriRequired)",
        "client error (Canceled)",
    ];
    e.is_connect() || UNSENT.contains(&e.to_string().as_str())
}

/// True when hyper refused the response head for its size or header count.
fn head_too_large(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(e) = source {
        if e.downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_parse_too_large)
        {
            return true;
        }
        source = e.source();
    }
    false
}

/// The upstream's `Host` field: its host, and its port unless the scheme's default, as
/// hyper-util's client writes it when a request has none (`set_host`), once instead of with
/// `format!` for every request.
fn upstream_host(scheme: &http::uri::Scheme, authority: &http::uri::Authority) -> HeaderValue {
    let default_port = if *scheme == http::uri::Scheme::HTTPS {
        443
    } else {
        80
    };
    let text = match authority.port_u16() {
        Some(port) if port != default_port => format!("{}:{port}", authority.host()),
        _ => authority.host().to_owned(),
    };
    HeaderValue::from_str(&text).expect("a URI's host and port are a valid field value")
}

/// The `X-Forwarded-For` sent upstream: every `X-Forwarded-For` field the request had, in
/// order and joined with `, ` (empty ones left out; their bytes as sent, obs-text included),
/// then the client's address, as nginx's `$proxy_add_x_forwarded_for` does. IPv4 is written
/// by hand: `Ipv4Addr`'s `Display` (it supports width and padding) cost 1.6k instructions
/// per proxied request.
fn forwarded_for(prior: http::header::GetAll<'_, HeaderValue>, ip: IpAddr) -> Option<HeaderValue> {
    let mut out = Vec::with_capacity(48);
    for value in prior.iter().map(|v| v.as_bytes().trim_ascii()) {
        if !value.is_empty() {
            out.extend_from_slice(value);
            out.extend_from_slice(b", ");
        }
    }
    match ip {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                if octet >= 100 {
                    out.push(b'0' + octet / 100);
                }
                if octet >= 10 {
                    out.push(b'0' + octet / 10 % 10);
                }
                out.push(b'0' + octet % 10);
            }
        }
        IpAddr::V6(v6) => {
            use std::io::Write as _;
            // Writing to a Vec cannot fail.
            let _ = write!(out, "{v6}");
        }
    }
    HeaderValue::from_maybe_shared(bytes::Bytes::from(out)).ok()
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

impl<C: Connect + Clone + Send + Sync + 'static> tower::Service<Request<BoxBody>> for Proxy<C> {
    type Response = Response<Incoming>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response<Incoming>, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<BoxBody>) -> Self::Future {
        let (this, https) = (self.upstream.clone(), self.https);
        Box::pin(async move {
            to_http11(&mut req);
            *req.uri_mut() = this
                .upstream_uri(req.uri())
                .map_err(|e| NotSent(e.into()))?;
            let client = req.extensions().get::<ConnectInfo<SocketAddr>>();
            // An IPv4 client on a dual-stack listener is written as IPv4, not `::ffff:a.b.c.d`.
            let client = client.map(|ConnectInfo(addr)| addr.ip().to_canonical());
            let headers = req.headers_mut();
            strip_hop_by_hop(headers);
            // Reserved: only idemgate says a response is a replay; never trusted from clients.
            headers.remove(IDEMPOTENT_REPLAYED);
            // Only the gateway says which host the client asked for: a client's own
            // `X-Forwarded-Host` never reaches the upstream, with or without a `Host`.
            headers.remove(X_FORWARDED_HOST);
            if let Some(host) = headers.remove(HOST) {
                headers.insert(X_FORWARDED_HOST, host);
            }
            headers.insert(HOST, this.host.clone());
            let proto = HeaderValue::from_static(if https { "https" } else { "http" });
            headers.insert(X_FORWARDED_PROTO, proto);
            if let Some(ip) = client {
                if let Some(v) = forwarded_for(headers.get_all(X_FORWARDED_FOR), ip) {
                    headers.insert(X_FORWARDED_FOR, v);
                }
            }
            let mut resp = match tokio::time::timeout(this.timeout, this.client.request(req)).await
            {
                Err(_) => return Err(UpstreamTimeout(this.timeout).into()),
                Ok(Err(e)) if not_sent(&e) => return Err(NotSent(e.into()).into()),
                Ok(Err(e)) if head_too_large(&e) => {
                    tracing::warn!(error = %e, "upstream response head too large");
                    return Err(UpstreamHeadTooLarge(this.max_headers).into());
                }
                Ok(Err(e)) => return Err(e.into()),
                Ok(Ok(resp)) => resp,
            };
            if resp.status() == http::StatusCode::SWITCHING_PROTOCOLS {
                return Err(UnsolicitedUpgrade.into());
            }
            strip_hop_by_hop(resp.headers_mut());
            // A proxy answers with its own version (RFC 9110 §6.2), not an HTTP/1.0
            // upstream's: hyper then frames the answer for the client's version (chunked
            // and kept alive for HTTP/1.1, close-delimited for an HTTP/1.0 client).
            *resp.version_mut() = Version::HTTP_11;
            Ok(resp)
        })
    }
}

#[cfg(test)]
mod tests;
