//! One exchange with the API under test: a request on a connection of its own (HTTP/1.1, TLS
//! for `https://`), read to the end of its answer, or sent and then abandoned (the client
//! closes the connection without reading: a disconnect mid-request).
//!
//! A connection per request keeps every exchange apart (no pool that retries a request on
//! another connection, no request queued behind another) and sends the path exactly as
//! given: `//payments`, `/p%61yments` and a trailing slash reach the server as spelled.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest a probe request may take, connection and whole answer included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Most bytes of an answer's body shown in a report.
const SHOWN_BODY: usize = 300;

/// Most bytes of an answer's body read: past it the exchange has no answer (a server that
/// streams without end cannot fill the probe's memory).
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// Where requests go: the target URL's scheme and authority.
#[derive(Clone)]
pub struct Target {
    /// `host:port` to connect to.
    addr: String,
    /// The `Host` field: the URL's authority as written.
    authority: String,
    /// TLS for `https://`: the client configuration and the name the certificate must hold.
    tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("addr", &self.addr)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Target {
    /// The target of `uri` (`http://` or `https://`, with a host); `tls` is the client
    /// configuration for `https://` (its trust roots).
    ///
    /// # Errors
    /// Another scheme, no host, or `https://` without `tls`.
    pub fn new(uri: &http::Uri, tls: Option<Arc<rustls::ClientConfig>>) -> anyhow::Result<Self> {
        let host = uri.host().ok_or_else(|| anyhow::anyhow!("URL: no host"))?;
        let authority = uri
            .authority()
            .map(|a| a.as_str().to_owned())
            .unwrap_or_default();
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => anyhow::bail!("URL: the scheme must be http or https"),
        };
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addr = match bare.contains(':') {
            true => format!("[{bare}]:{port}"),
            false => format!("{bare}:{port}"),
        };
        let tls = match https {
            false => None,
            true => {
                let config = tls.ok_or_else(|| anyhow::anyhow!("URL: https without TLS"))?;
                let name = ServerName::try_from(bare.to_owned())
                    .map_err(|e| anyhow::anyhow!("URL: host {bare}: {e}"))?;
                Some((config, name))
            }
        };
        Ok(Self {
            addr,
            authority,
            tls,
        })
    }

    /// Sends `request` and reads its whole answer, within [`REQUEST_TIMEOUT`].
    pub async fn send(&self, request: Request) -> Exchange {
        let answer = tokio::time::timeout(REQUEST_TIMEOUT, self.exchange(&request)).await;
        let answer = match answer {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(format!("{e:#}")),
            Err(_) => Err(format!("no answer within {REQUEST_TIMEOUT:?}")),
        };
        Exchange { request, answer }
    }

    /// Writes `request` whole, waits `linger`, then closes the connection without reading
    /// its answer.
    ///
    /// # Errors
    /// The connection could not be made or written.
    pub async fn abandon(&self, request: &Request, linger: Duration) -> anyhow::Result<()> {
        let mut head = format!(
            "{} {} HTTP/1.1\r\nhost: {}\r\n",
            request.method, request.path, self.authority
        );
        for (name, value) in &request.headers {
            let value = String::from_utf8_lossy(value.as_bytes());
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str(&format!("content-length: {}\r\n\r\n", request.body.len()));
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(&request.body);
        let mut io = self.connect().await?;
        io.write_all(&bytes).await?;
        io.flush().await?;
        tokio::time::sleep(linger).await;
        drop(io);
        Ok(())
    }

    /// Whether a connection (and TLS handshake) can be made, within [`REQUEST_TIMEOUT`].
    ///
    /// # Errors
    /// Why not.
    pub async fn reachable(&self) -> anyhow::Result<()> {
        match tokio::time::timeout(REQUEST_TIMEOUT, self.connect()).await {
            Ok(io) => io.map(drop),
            Err(_) => anyhow::bail!("no connection within {REQUEST_TIMEOUT:?}"),
        }
    }

    async fn connect(&self) -> anyhow::Result<Box<dyn Io>> {
        let tcp = TcpStream::connect(&self.addr).await?;
        tcp.set_nodelay(true)?;
        match &self.tls {
            None => Ok(Box::new(tcp)),
            Some((config, name)) => {
                let connector = tokio_rustls::TlsConnector::from(config.clone());
                Ok(Box::new(connector.connect(name.clone(), tcp).await?))
            }
        }
    }

    async fn exchange(&self, request: &Request) -> anyhow::Result<Answer> {
        let io = self.connect().await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
        let driver = tokio::spawn(conn);
        let mut builder = http::Request::builder()
            .method(request.method.clone())
            .uri(request.path.as_str())
            .header(http::header::HOST, self.authority.as_str());
        for (name, value) in &request.headers {
            builder = builder.header(name, value);
        }
        let req = builder.body(Full::new(request.body.clone()))?;
        let response = sender.send_request(req).await;
        let answer = match response {
            Ok(response) => {
                let (parts, body) = response.into_parts();
                let body = http_body_util::Limited::new(body, MAX_ANSWER_BYTES);
                let body = body.collect().await.map_err(|e| anyhow::anyhow!("{e}"))?;
                let body = body.to_bytes();
                Ok(Answer {
                    status: parts.status.as_u16(),
                    headers: parts.headers,
                    body,
                })
            }
            Err(e) => Err(e.into()),
        };
        driver.abort();
        answer
    }
}

/// A connection, plain or TLS.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// A request as the probe sends it.
#[derive(Debug, Clone)]
pub struct Request {
    /// The method.
    pub method: Method,
    /// The path and query, sent as written.
    pub path: String,
    /// Header fields in order (a name may repeat); `Host` and `Content-Length` are added.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The body.
    pub body: Bytes,
}

/// An answer read whole.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The header fields.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

impl Answer {
    /// The first value of `name` as text (`""` when absent or not text).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// Whether the answer is `application/problem+json` (RFC 9457).
    pub fn is_problem(&self) -> bool {
        self.header("content-type")
            .split(';')
            .next()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/problem+json"))
    }
}

/// A request and what came back: the answer, or why there is none.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// What was sent.
    pub request: Request,
    /// What came back.
    pub answer: Result<Answer, String>,
}

impl Exchange {
    /// The status, or 0 without an answer.
    pub fn status(&self) -> u16 {
        self.answer.as_ref().map_or(0, |a| a.status)
    }
}

impl fmt::Display for Exchange {
    /// `> POST /path`, the request's fields, `< 201`, the answer's fields that matter
    /// (`Content-Type`, `Location`, `Retry-After`, `Idempotent-*`) and its body, shortened;
    /// control characters escaped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.request;
        writeln!(f, "    > {} {}", r.method, shown(r.path.as_bytes()))?;
        for (name, value) in &r.headers {
            writeln!(f, "    > {name}: {}", shown(value.as_bytes()))?;
        }
        if !r.body.is_empty() {
            writeln!(f, "    > ({} bytes of body)", r.body.len())?;
        }
        let a = match &self.answer {
            Ok(a) => a,
            Err(e) => return writeln!(f, "    < no answer: {}", shown(e.as_bytes())),
        };
        writeln!(f, "    < {}", a.status)?;
        for (name, value) in &a.headers {
            let kept = matches!(name.as_str(), "content-type" | "location" | "retry-after")
                || name.as_str().starts_with("idempotent-");
            if kept {
                writeln!(f, "    < {name}: {}", shown(value.as_bytes()))?;
            }
        }
        let cut = &a.body[..a.body.len().min(SHOWN_BODY)];
        let more = if cut.len() < a.body.len() { " ..." } else { "" };
        writeln!(f, "    < {}{more}", shown(cut))
    }
}

/// `bytes` as text for a terminal: invalid UTF-8 replaced, control characters (escape
/// sequences a hostile server could send to the user's terminal) written as escapes.
pub(crate) fn shown(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .flat_map(|c| match c.is_control() {
            true => c.escape_default().collect::<Vec<_>>(),
            false => vec![c],
        })
        .collect()
}
