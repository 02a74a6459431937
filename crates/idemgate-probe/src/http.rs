//! One exchange with the API under test: a request on a connection of its own (HTTP/1.1, TLS
//! for `https://`), read to the end of its answer, or sent and then abandoned (the client
//! closes its sending side: a disconnect mid-request, whose answer is still read if the
//! server writes one).
//!
//! A connection per request keeps every exchange apart (no pool that retries a request on
//! another connection, no request queued behind another) and sends the path exactly as
//! given: `//payments`, `/p%61yments` and a trailing slash reach the server as spelled.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a client that leaves waits after sending its request: long enough for a
/// server to read it and start on it, short enough to leave before most answers.
pub const LEAVE_AFTER: Duration = Duration::from_millis(20);

/// Most bytes of an answer's body shown in a report.
const SHOWN_BODY: usize = 300;

/// Most bytes of an answer's body read: past it the exchange has no answer (a server that
/// streams without end cannot fill the probe's memory).
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// Most header fields of an answer read (hyper's default is 100: a replay that repeats
/// every field of a rich answer may carry more).
pub const MAX_ANSWER_FIELDS: usize = 1024;

/// Where requests go: the target URL's scheme and authority.
#[derive(Clone)]
pub struct Target {
    /// `host:port` to connect to.
    addr: String,
    /// The `Host` field: the URL's authority as written.
    authority: String,
    /// TLS for `https://`: the client configuration and the name the certificate must hold.
    tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    /// Longest one request may take, connection and whole answer included.
    timeout: Duration,
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
    /// configuration for `https://` (its trust roots); `timeout` bounds each request,
    /// connection and whole answer included.
    ///
    /// # Errors
    /// Another scheme, no host, or `https://` without `tls`.
    pub fn new(
        uri: &http::Uri,
        tls: Option<Arc<rustls::ClientConfig>>,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
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
            timeout,
        })
    }

    /// Sends `request` and reads its whole answer, within the target's timeout.
    pub async fn send(&self, request: Request) -> Exchange {
        let answer = async {
            let io = self.connect().await?;
            answer_on(io, &self.authority, &request).await
        };
        let answer = self.within(answer).await;
        Exchange { request, answer }
    }

    /// A client that leaves: writes `request` whole, waits [`LEAVE_AFTER`], closes the
    /// connection's sending side
    /// (the end of the stream most servers take as the client gone) and reads whatever
    /// answer the server still writes, within the target's timeout. The exchange's answer
    /// is `Err` when the server wrote none.
    ///
    /// # Errors
    /// The connection could not be made or the request not written.
    pub async fn abandon(&self, request: Request) -> anyhow::Result<Exchange> {
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
        let sent = async {
            let mut io = self.connect().await?;
            io.write_all(&bytes).await?;
            io.flush().await?;
            // The server reads the request and starts on it before the client leaves.
            tokio::time::sleep(LEAVE_AFTER).await;
            io.shutdown().await?;
            anyhow::Ok(io)
        };
        let io = match tokio::time::timeout(self.timeout, sent).await {
            Ok(io) => io?,
            Err(_) => anyhow::bail!("not sent within {:?}", self.timeout),
        };
        // The request is already on the wire: hyper parses the answer, its writes dropped.
        let answer = self.within(answer_on(
            Box::new(ReadOnly { io, written: false }),
            &self.authority,
            &request,
        ));
        let answer = answer.await;
        Ok(Exchange { request, answer })
    }

    /// Whether a connection (and TLS handshake) can be made, within the target's timeout.
    ///
    /// # Errors
    /// Why not.
    pub async fn reachable(&self) -> anyhow::Result<()> {
        match tokio::time::timeout(self.timeout, self.connect()).await {
            Ok(io) => io.map(drop),
            Err(_) => anyhow::bail!("no connection within {:?}", self.timeout),
        }
    }

    /// `answer` within the target's timeout, its error as text.
    async fn within(
        &self,
        answer: impl std::future::Future<Output = anyhow::Result<Answer>>,
    ) -> Result<Answer, String> {
        match tokio::time::timeout(self.timeout, answer).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(format!("{e:#}")),
            Err(_) => Err(format!("no answer within {:?}", self.timeout)),
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
}

/// Sends `request` on `io` (`Host: authority`) and reads its answer, at most
/// [`MAX_ANSWER_BYTES`] of body.
async fn answer_on(io: Box<dyn Io>, authority: &str, request: &Request) -> anyhow::Result<Answer> {
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .max_headers(MAX_ANSWER_FIELDS)
        .handshake(TokioIo::new(io))
        .await?;
    let mut builder = http::Request::builder()
        .method(request.method.clone())
        .uri(request.path.as_str())
        .header(http::header::HOST, authority);
    for (name, value) in &request.headers {
        builder = builder.header(name, value);
    }
    let req = builder.body(Full::new(request.body.clone()))?;
    // Queued before the connection is first polled: an answer already waiting on it (a
    // client that left reads one) is then the answer to this request, not an unexpected
    // message.
    let sent = sender.send_request(req);
    let driver = tokio::spawn(conn);
    let answer = async {
        let (parts, body) = sent.await?.into_parts();
        let body = http_body_util::Limited::new(body, MAX_ANSWER_BYTES);
        let body = body.collect().await.map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(Answer {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: body.to_bytes(),
        })
    };
    let answer = answer.await;
    driver.abort();
    answer
}

/// A connection whose writes are dropped: the answer to a request already written. Reads
/// wait for the first write: hyper's client takes bytes that arrive before it has written
/// its request as an unexpected message, and the answer may already be waiting.
struct ReadOnly {
    io: Box<dyn Io>,
    written: bool,
}

impl AsyncRead for ReadOnly {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.written {
            // Polled again at once: the write comes in the same pass of hyper's connection.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for ReadOnly {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.written = true;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
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
            // Credentials are never printed: only the fields the probe itself varies.
            match matches!(name.as_str(), "idempotency-key" | "content-type") {
                true => writeln!(f, "    > {name}: {}", shown(value.as_bytes()))?,
                false => writeln!(f, "    > {name}: ({} bytes, not shown)", value.len())?,
            }
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
        .flat_map(|c| match c.is_control() || invisible(c) {
            true => c.escape_default().collect::<Vec<_>>(),
            false => vec![c],
        })
        .collect()
}

/// Characters that reorder or break a terminal's text without showing: bidirectional
/// controls (Unicode TR 9: U+061C, U+200E/F, U+202A-E, U+2066-9), line and paragraph
/// separators (U+2028/9), zero-width characters and the byte order mark.
fn invisible(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{2069}' | '\u{feff}')
}
