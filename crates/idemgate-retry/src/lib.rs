//! A retrying HTTP client for APIs behind idemgate (the gateway or the tower layer): a
//! [`tower::Layer`] that sends each `POST`/`PATCH` as one logical operation with one
//! `Idempotency-Key` (draft-ietf-httpapi-idempotency-key-header), retried with the same key
//! and the same bytes until its answer is final.
//!
//! It retries connection errors, attempt timeouts, idemgate's `409` in flight (recognised by
//! its problem type `request-in-flight`, never by the status alone: an upstream's own `409`,
//! fresh or replayed, is final) after `Retry-After`, and `503`; it stops on
//! `outcome-unknown` and `previous-attempt-failed`, which a retry cannot resolve. See
//! [`IdempotentRetry`] for every rule and [`RetryPolicy`] for the knobs, and
//! `docs/clients.md` for the same contract in other languages.
//!
//! With hyper-util's client (its body must be cloneable, e.g. `Full<Bytes>`):
//!
//! ```no_run
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use idemgate_retry::{IdempotentRetryLayer, RetryPolicy};
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
//! let mut client = ServiceBuilder::new()
//!     .layer(IdempotentRetryLayer::new(RetryPolicy::default()))
//!     .service(client);
//! let request = http::Request::post("http://127.0.0.1:8080/payments")
//!     .header("authorization", "Bearer token")
//!     .header("content-type", "application/json")
//!     .body(Full::new(Bytes::from_static(br#"{"amount": 1000, "currency": "EUR"}"#)))?;
//! let response = client.ready().await?.call(request).await?;
//! println!("{} replayed={:?}", response.status(), response.headers().get("idempotent-replayed"));
//! # Ok(()) }
//! ```
//!
//! With reqwest (feature `reqwest`; `reqwest::Client` is a `tower::Service<reqwest::Request>`):
//!
//! ```no_run
//! # #[cfg(feature = "reqwest")]
//! # async fn example(url: &str) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use idemgate_retry::{IdempotentRetryLayer, RetryPolicy};
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! let http = reqwest::Client::new();
//! let mut client = ServiceBuilder::new()
//!     .layer(IdempotentRetryLayer::new(RetryPolicy::default()))
//!     .service(http.clone());
//! let payment = serde_json::json!({"amount": 1000, "currency": "EUR"});
//! let request = http.post(url).bearer_auth("token").json(&payment).build()?;
//! let response: reqwest::Response = client.ready().await?.call(request).await?;
//! println!("{}", response.status());
//! # Ok(()) }
//! ```
//!
//! To keep the key across a restart of the caller, set the header yourself (a key the
//! request already has is kept) and store it with the operation.

mod classify;
mod exchange;
mod policy;
mod service;

pub use classify::{judge, Verdict};
pub use exchange::{Inspection, Judged, Replayable, RetryBody};
pub use policy::RetryPolicy;
pub use service::{AttemptTimedOut, IdempotentRetry, IdempotentRetryLayer, RetryError};

/// A boxed error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
