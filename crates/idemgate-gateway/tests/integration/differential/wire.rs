//! Requests whose target reaches the wire byte for byte as written (hyper's HTTP/1 client
//! connection writes a path-only `Uri` as given; reqwest and `url` would resolve `/./` and
//! `/../` first), and the upstreams' counters.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use tokio::net::TcpStream;

/// The one body every spelling is sent with, so only the path differs.
const BODY: &str = r#"{"amount":1000,"currency":"EUR"}"#;

/// What came back for one request.
#[derive(Debug, Clone)]
pub(super) struct Answer {
    pub(super) status: u16,
    /// `Idempotent-Replayed: true` was present.
    pub(super) replayed: bool,
    /// The problem `type` of a `problem+json` body.
    pub(super) problem: Option<String>,
    pub(super) location: Option<String>,
}

impl Answer {
    /// The answer in a few characters, for the tables.
    pub(super) fn short(&self) -> String {
        let mut s = self.status.to_string();
        if self.replayed {
            s.push_str(" replayed");
        }
        if let Some(p) = &self.problem {
            s.push(' ');
            s.push_str(p.rsplit(':').next().unwrap_or(p));
        }
        if let Some(l) = &self.location {
            s.push_str(&format!(
                " -> {}",
                l.rsplit_once("://").map_or(l.as_str(), |x| x.1)
            ));
        }
        s
    }

    /// The problem type, if the answer is one.
    pub(super) fn is_problem(&self, status: u16, anchor: &str) -> bool {
        self.status == status
            && self.problem.as_deref() == Some(&format!("urn:idemgate:problem:{anchor}"))
    }
}

/// One more header field of a request: name and value.
pub(super) type Field<'a> = Option<(&'a str, &'a str)>;

/// Sends `method target` to `addr` (`host:port`) on a fresh connection, as user alice with
/// the JSON body (for a POST), `key` if given and the `extra` field if any.
pub(super) async fn send(
    addr: &str,
    method: &str,
    (target, extra): (&str, Field<'_>),
    key: Option<&str>,
) -> Answer {
    let (status, headers, body) = exchange(addr, method, (target, extra), key).await;
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let problem = (header("content-type") == Some("application/problem+json"))
        .then(|| serde_json::from_slice::<serde_json::Value>(&body).ok())
        .flatten()
        .and_then(|v| v["type"].as_str().map(str::to_owned));
    Answer {
        status,
        replayed: header("idempotent-replayed") == Some("true"),
        problem,
        location: header("location").map(str::to_owned),
    }
}

/// One request on a fresh connection, 30 s at most.
async fn exchange(
    addr: &str,
    method: &str,
    (target, extra): (&str, Field<'_>),
    key: Option<&str>,
) -> (u16, http::HeaderMap, Bytes) {
    tokio::time::timeout(
        Duration::from_secs(30),
        exchange_now(addr, method, (target, extra), key),
    )
    .await
    .unwrap_or_else(|_| panic!("{method} {target} to {addr}: no answer within 30 s"))
}

async fn exchange_now(
    addr: &str,
    method: &str,
    (target, extra): (&str, Field<'_>),
    key: Option<&str>,
) -> (u16, http::HeaderMap, Bytes) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    // A path-only `Uri` keeps its bytes: no dot-segment removal, no decoding, no case change.
    let uri: Uri = target.parse().unwrap_or_else(|e| panic!("{target}: {e}"));
    assert_eq!(uri.to_string(), target, "the target is sent as written");
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .header("host", addr)
        .header("authorization", "Bearer alice");
    let body = if method == "POST" {
        req = req.header("content-type", "application/json");
        Bytes::from_static(BODY.as_bytes())
    } else {
        Bytes::new()
    };
    if let Some(k) = key {
        req = req.header("idempotency-key", k);
    }
    if let Some((name, value)) = extra {
        req = req.header(name, value);
    }
    let resp = sender
        .send_request(req.body(Full::new(body)).unwrap())
        .await
        .unwrap_or_else(|e| panic!("{method} {target} to {addr}: {e}"));
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, headers, body)
}

/// An upstream's counters (`GET /counts`).
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Counts {
    /// Executions per resource, named as the framework routed them.
    pub(super) executions: BTreeMap<String, u64>,
    /// The target of every POST that reached the server, in order.
    pub(super) arrivals: Vec<String>,
    /// Framework and runtime versions.
    pub(super) server: String,
}

impl Counts {
    pub(super) fn executed(&self, resource: &str) -> u64 {
        self.executions.get(resource).copied().unwrap_or(0)
    }
}

/// The counters of the upstream at `addr`.
pub(super) async fn counts(addr: &str) -> Counts {
    let (status, _, body) = exchange(addr, "GET", ("/counts", None), None).await;
    assert_eq!(status, 200, "GET /counts");
    serde_json::from_slice(&body).unwrap()
}
