//! What `idemgate demo` and `idemgate demo-api` run, kept out of the gateway library: the
//! example payments API ([`payments`]), which charges a ledger on every `POST /payments` and
//! has no idempotency of its own, and the incidents idemgate exists for (a timeout and its
//! retry, a double click, a changed amount, a burst of duplicates, a client that disconnects),
//! replayed with a real HTTP client once straight to the API and once through a gateway.
//!
//! The gateway is the caller's: [`run`] and [`run_incidents`] take the function that starts
//! one (the `idemgate` binary passes an in-process gateway on a temporary SQLite store).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

mod incidents;
pub mod payments;

pub use incidents::{run, run_incidents, Incident, Outcome};

/// The future that stops a gateway the demo started: it completes once the incident is over.
pub type Stop = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What starting a gateway gives: its base URL (`http://127.0.0.1:PORT`) and its task, which
/// ends once the gateway drained after [`Stop`] and let go of its store (the demo deletes
/// the store's temporary directory then).
pub type Spawned = anyhow::Result<(String, tokio::task::JoinHandle<anyhow::Result<()>>)>;

/// `idemgate demo-api`: serves the example payments API on `listen` until `shutdown`,
/// after printing its address.
///
/// # Errors
/// When `listen` cannot be bound or the listener fails.
pub async fn serve_api(
    listen: SocketAddr,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("example payments API on http://{}", listener.local_addr()?);
    payments::serve(listener, shutdown).await
}
