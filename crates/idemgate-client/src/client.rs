//! [`KeyServiceClient`]: the typed calls of the key service's HTTP API.

use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::wire::{
    AcquireRequest, AcquireResponse, CompleteRequest, LeaseRequest, OutcomeResponse, Problem,
    RecordView, ReleaseRequest, RenewRequest, RenewResponse,
};

/// Why a call failed. Only [`ClientError::Problem`] means the service answered; after any
/// other error the caller cannot know whether a write landed, and must not run the
/// operation on its strength.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// No answer within the client's timeout.
    #[error("the key service did not answer within {0:?}")]
    Timeout(Duration),
    /// The service could not be reached, or the connection broke.
    #[error("the key service is unreachable")]
    Unreachable(#[source] reqwest::Error),
    /// The service answered with a problem (`4xx`, `5xx`).
    #[error("the key service answered {}: {}", .0.status, .0.detail)]
    Problem(Box<Problem>),
    /// The answer could not be read.
    #[error("unexpected answer from the key service: {0}")]
    Decode(String),
    /// The URL is not `idemgate://`, `idemgates://`, `http://` or `https://`.
    #[error("invalid key service URL: {0}")]
    Url(String),
}

impl ClientError {
    /// The problem's anchor (`lease-lost`, `store-unavailable`...) if the service answered.
    pub fn anchor(&self) -> Option<&str> {
        match self {
            Self::Problem(p) => Some(p.anchor()),
            _ => None,
        }
    }
}

/// A client of one key service. Cheap to clone.
///
/// ```no_run
/// # async fn run() -> Result<(), idemgate_client::ClientError> {
/// use idemgate_client::wire::{AcquireRequest, AcquireResponse};
/// use idemgate_client::KeyServiceClient;
///
/// let client = KeyServiceClient::new("idemgate://127.0.0.1:8081")?.with_token("secret");
/// let answer = client
///     .acquire(&AcquireRequest {
///         scope: "POST /payments".into(),
///         principal: "user-42".into(),
///         key: "order-2024-0001".into(),
///         fingerprint: Some("amount=10;currency=EUR".into()),
///         ..Default::default()
///     })
///     .await?;
/// if let AcquireResponse::Run { lease, .. } = answer {
///     // run the operation, then client.complete(...)
/// #   let _ = lease;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct KeyServiceClient {
    http: reqwest::Client,
    base: String,
    /// `base` parsed once; each call's URL is it with the call's path
    /// ([`KeyServiceClient::url`]), so no call parses a URL (and its host) again.
    endpoint: reqwest::Url,
    token: Option<Arc<str>>,
    timeout: Duration,
}

impl std::fmt::Debug for KeyServiceClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("KeyServiceClient")
            .field("base", &self.base)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// The default deadline of one call: 2 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

impl KeyServiceClient {
    /// A client of the service at `url`: `idemgate://host:port` (HTTP),
    /// `idemgates://host:port` (HTTPS, the system's roots), or an `http(s)://` base URL.
    ///
    /// # Errors
    /// [`ClientError::Url`] for another scheme or an empty host.
    pub fn new(url: &str) -> Result<Self, ClientError> {
        Self::build(url, None)
    }

    /// Checks a key service URL without building a client: the forms of
    /// [`KeyServiceClient::new`].
    ///
    /// # Errors
    /// [`ClientError::Url`] naming what is wrong.
    pub fn check_url(url: &str) -> Result<(), ClientError> {
        parse(&base_url(url)?).map(drop)
    }

    /// [`KeyServiceClient::new`] with a rustls configuration for `idemgates://` (e.g. roots
    /// from a CA file).
    ///
    /// # Errors
    /// As [`KeyServiceClient::new`].
    pub fn with_tls(url: &str, tls: rustls::ClientConfig) -> Result<Self, ClientError> {
        Self::build(url, Some(tls))
    }

    fn build(url: &str, tls: Option<rustls::ClientConfig>) -> Result<Self, ClientError> {
        let base = base_url(url)?;
        let endpoint = parse(&base)?;
        let mut builder = reqwest::Client::builder()
            .connect_timeout(DEFAULT_TIMEOUT)
            .tcp_nodelay(true)
            // Never through a proxy from the environment: the token goes to this URL only.
            .no_proxy()
            .pool_idle_timeout(Duration::from_secs(30))
            .redirect(reqwest::redirect::Policy::none());
        if let Some(tls) = tls {
            builder = builder.use_preconfigured_tls(tls);
        }
        let http = builder
            .build()
            .map_err(|e| ClientError::Url(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            http,
            base,
            endpoint,
            token: None,
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// Sends `Authorization: Bearer <token>` with every call.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(Arc::from(token.into()));
        self
    }

    /// The deadline of each call (connect, send, answer). Defaults to [`DEFAULT_TIMEOUT`].
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The base URL calls go to, e.g. `http://127.0.0.1:8081`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `POST /v1/acquire`.
    ///
    /// # Errors
    /// See [`ClientError`]; `400` problems name the field at fault.
    pub async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireResponse, ClientError> {
        self.post("/v1/acquire", req).await
    }

    /// `POST /v1/renew`.
    ///
    /// # Errors
    /// A `409` `lease-lost` problem when the lease is stale.
    pub async fn renew(&self, req: &RenewRequest) -> Result<RenewResponse, ClientError> {
        self.post("/v1/renew", req).await
    }

    /// `POST /v1/complete`; repeating it with the same lease and response succeeds.
    ///
    /// # Errors
    /// A `409` `lease-lost` problem when the lease is stale.
    pub async fn complete(&self, req: &CompleteRequest) -> Result<OutcomeResponse, ClientError> {
        self.post("/v1/complete", req).await
    }

    /// `POST /v1/fail`.
    ///
    /// # Errors
    /// A `409` `lease-lost` problem when the lease is stale.
    pub async fn fail(&self, req: &LeaseRequest) -> Result<OutcomeResponse, ClientError> {
        self.post("/v1/fail", req).await
    }

    /// `POST /v1/release`.
    ///
    /// # Errors
    /// A `409` `lease-lost` problem when the lease is stale.
    pub async fn release(&self, req: &ReleaseRequest) -> Result<OutcomeResponse, ClientError> {
        self.post("/v1/release", req).await
    }

    /// `GET /v1/records`: `None` when there is no live record.
    ///
    /// # Errors
    /// See [`ClientError`].
    pub async fn record(
        &self,
        scope: &str,
        principal: &str,
        key: &str,
        body: bool,
    ) -> Result<Option<RecordView>, ClientError> {
        let mut query = vec![("scope", scope), ("principal", principal), ("key", key)];
        if body {
            query.push(("body", "true"));
        }
        let req = self
            .authorized(self.http.get(self.url("/v1/records")))
            .query(&query);
        match self.send(req).await {
            Err(ClientError::Problem(p)) if p.status == 404 => Ok(None),
            other => other.map(Some),
        }
    }

    /// `POST {path}` with a JSON body.
    pub(crate) async fn post<B: Serialize, R: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<R, ClientError> {
        let req = self.authorized(self.http.post(self.url(path))).json(body);
        self.send(req).await
    }

    /// How long a call may take (the default [`DEFAULT_TIMEOUT`]).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `POST {path}` with `body`, answered within `timeout` (not the client's): a
    /// long-poll.
    pub(crate) async fn post_within<B: Serialize, R: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        timeout: Duration,
    ) -> Result<R, ClientError> {
        let req = self.authorized(self.http.post(self.url(path))).json(body);
        Self::send_within(req, timeout).await
    }

    /// `GET {path}`.
    pub(crate) async fn get<R: DeserializeOwned>(&self, path: &str) -> Result<R, ClientError> {
        let req = self.authorized(self.http.get(self.url(path)));
        self.send(req).await
    }

    /// The base URL with `path` (`/v1/...`) after its own path.
    fn url(&self, path: &str) -> reqwest::Url {
        let full = format!("{}{path}", self.endpoint.path().trim_end_matches('/'));
        let mut url = self.endpoint.clone();
        url.set_path(&full);
        url
    }

    fn authorized(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    async fn send<R: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<R, ClientError> {
        Self::send_within(req, self.timeout).await
    }

    async fn send_within<R: DeserializeOwned>(
        req: reqwest::RequestBuilder,
        timeout: Duration,
    ) -> Result<R, ClientError> {
        let call = async {
            let resp = req.send().await.map_err(ClientError::Unreachable)?;
            let status = resp.status();
            let bytes = resp.bytes().await.map_err(ClientError::Unreachable)?;
            if status.is_success() {
                return serde_json::from_slice(&bytes)
                    .map_err(|e| ClientError::Decode(e.to_string()));
            }
            Err(match serde_json::from_slice::<Problem>(&bytes) {
                Ok(p) => ClientError::Problem(Box::new(p)),
                Err(_) => ClientError::Decode(format!("status {status} without a problem body")),
            })
        };
        tokio::time::timeout(timeout, call)
            .await
            .unwrap_or(Err(ClientError::Timeout(timeout)))
    }
}

/// The URL `base_url` made, parsed.
fn parse(base: &str) -> Result<reqwest::Url, ClientError> {
    // The URL is never repeated: it may hold a password.
    reqwest::Url::parse(base).map_err(|e| ClientError::Url(format!("the URL is not valid: {e}")))
}

/// `idemgate://h:p[/prefix]` → `http://h:p[/prefix]`, `idemgates://` → `https://`.
fn base_url(url: &str) -> Result<String, ClientError> {
    let url = url.trim().trim_end_matches('/');
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| ClientError::Url("the URL has no scheme (idemgate://host:port)".into()))?;
    let scheme = match scheme {
        "idemgate" | "http" => "http",
        "idemgates" | "https" => "https",
        other => {
            return Err(ClientError::Url(format!(
                "`{other}://` is not idemgate://, idemgates://, http:// or https://"
            )))
        }
    };
    // The URL is never repeated: it may hold a password.
    let authority = rest.split('/').next().unwrap_or_default();
    let port = authority
        .rsplit_once(':')
        .map(|(host, port)| (host, port.parse::<u16>()));
    let has_port = matches!(port, Some((host, Ok(p))) if !host.is_empty() && p > 0);
    if !has_port || rest.contains(['?', '#', '@']) {
        return Err(ClientError::Url(
            "the URL needs host:port (a port from 1 to 65535), without credentials, query or \
             fragment"
                .into(),
        ));
    }
    Ok(format!("{scheme}://{rest}"))
}

#[cfg(test)]
mod tests {
    use super::{base_url, KeyServiceClient};

    #[test]
    fn a_call_s_url_is_the_base_with_its_path() {
        for (base, want) in [
            ("idemgate://h:1", "http://h:1/v1/acquire"),
            ("idemgates://h:1/ks/", "https://h:1/ks/v1/acquire"),
            ("http://[::1]:8081/a/b", "http://[::1]:8081/a/b/v1/acquire"),
        ] {
            let client = KeyServiceClient::new(base).unwrap();
            assert_eq!(client.url("/v1/acquire").as_str(), want, "{base}");
        }
    }

    #[test]
    fn a_url_that_does_not_parse_is_refused_at_once() {
        for bad in ["idemgate://h h:1", "idemgate://[::1:1"] {
            assert!(KeyServiceClient::check_url(bad).is_err(), "{bad}");
            assert!(KeyServiceClient::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn urls_map_to_http_and_https() {
        assert_eq!(base_url("idemgate://h:1").unwrap(), "http://h:1");
        assert_eq!(base_url("idemgates://h:1/ks/").unwrap(), "https://h:1/ks");
        assert!(base_url("redis://h:1").is_err());
        assert!(base_url("idemgate://").is_err());
        assert!(base_url("idemgate://tok@h:1").is_err());
        assert_eq!(
            base_url("idemgate://[::1]:8081").unwrap(),
            "http://[::1]:8081"
        );
        for bad in [
            "idemgate://h",
            "idemgate://h:99999",
            "idemgate://h:0",
            "idemgate://:1",
        ] {
            assert!(base_url(bad).is_err(), "{bad}");
        }
        // A password is never repeated, nor a value without a scheme (a secret pasted).
        for bad in ["idemgates://u:S3CRET@h", "S3CRET"] {
            let text = base_url(bad).unwrap_err().to_string();
            assert!(!text.contains("S3CRET"), "{text}");
        }
    }
}
