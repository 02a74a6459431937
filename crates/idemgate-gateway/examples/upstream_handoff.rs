//! What the upstream connection's own task costs a proxied request: a bare HTTP/1 proxy
//! (no idempotency, no router, no log) in two modes, measured with the same load against
//! the same upstream. Run on purpose, never in CI (`scripts/bench/upstream_handoff.sh`):
//!
//! ```text
//! cargo build --release -p idemgate-gateway --example upstream_handoff
//! target/release/examples/upstream_handoff pooled 127.0.0.1:18300 127.0.0.1:18080
//! target/release/examples/upstream_handoff pinned 127.0.0.1:18301 127.0.0.1:18080
//! ```
//!
//! - `pooled`: hyper-util's pooled client, as the gateway forwards. Each request crosses from
//!   its client connection's task to the upstream connection's task and back (hyper's
//!   dispatch channel).
//! - `pinned`: one upstream connection per client connection, opened with hyper's
//!   `client::conn::http1` and polled by the client connection's own task beside the
//!   server side: no second task, so no hand-off between tasks.
//!
//! The difference in CPU per request between the two is the most an upstream pool driven
//! from the request's own task could save the gateway.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Connector = hyper_util::client::legacy::connect::HttpConnector;

/// `req`'s URI with the upstream's authority (`http://upstream/path?query`).
fn to_upstream(req: &mut Request<Incoming>, upstream: SocketAddr) {
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    // A path hyper parsed, behind a socket address: always a valid URI.
    *req.uri_mut() = format!("http://{upstream}{path}")
        .parse::<Uri>()
        .expect("a valid URI");
}

async fn serve_pooled(
    stream: TcpStream,
    upstream: SocketAddr,
    client: Client<Connector, Incoming>,
) {
    let svc = service_fn(move |mut req: Request<Incoming>| {
        let client = client.clone();
        to_upstream(&mut req, upstream);
        client.request(req)
    });
    let _ = http1::Builder::new()
        .serve_connection(TokioIo::new(stream), svc)
        .await;
}

async fn serve_pinned(stream: TcpStream, upstream: SocketAddr) -> Result<(), BoxError> {
    let up = TcpStream::connect(upstream).await?;
    up.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(up)).await?;
    // hyper serves one request at a time per HTTP/1 connection: the lock is never contended.
    let sender = Arc::new(Mutex::new(sender));
    let svc = service_fn(move |req: Request<Incoming>| {
        sender.lock().expect("not poisoned").send_request(req)
    });
    let server = http1::Builder::new().serve_connection(TokioIo::new(stream), svc);
    // Both sides in this one task; the upstream side ends once the server side dropped
    // its sender.
    let (served, upstream_side) = tokio::join!(server, conn);
    served?;
    upstream_side?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().collect();
    let [_, mode, listen, upstream] = args.as_slice() else {
        return Err("usage: upstream_handoff pooled|pinned LISTEN UPSTREAM".into());
    };
    let upstream: SocketAddr = upstream.parse()?;
    let listener = TcpListener::bind(listen.as_str()).await?;
    let mut connector = Connector::new();
    connector.set_nodelay(true);
    let client = Client::builder(TokioExecutor::new()).build(connector);
    let pinned = match mode.as_str() {
        "pinned" => true,
        "pooled" => false,
        other => return Err(format!("mode {other:?}: pooled or pinned").into()),
    };
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        if pinned {
            tokio::spawn(serve_pinned(stream, upstream));
        } else {
            tokio::spawn(serve_pooled(stream, upstream, client.clone()));
        }
    }
}
