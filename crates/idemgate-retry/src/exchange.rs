//! The requests the layer can send again and the answers it can judge: `http` types (for
//! hyper-util's client and any tower HTTP service) and, with the `reqwest` feature, reqwest's.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method};
use http_body::Body;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};

use crate::classify::{judge, needs_body, Verdict};
use crate::{BoxError, RetryPolicy};

/// The body of the `http` responses the layer hands back.
pub type RetryBody = UnsyncBoxBody<Bytes, BoxError>;

/// A boxed future of an inspection.
pub type Inspection<O> = Pin<Box<dyn Future<Output = Result<(Verdict, O), BoxError>> + Send>>;

/// A request the layer can send again, byte for byte.
pub trait Replayable: Sized {
    /// Its method.
    fn method(&self) -> &Method;
    /// Its headers, where the key goes.
    fn headers_mut(&mut self) -> &mut HeaderMap;
    /// Its headers.
    fn headers(&self) -> &HeaderMap;
    /// A copy with the same method, URI, headers and body, or `None` when the body cannot be
    /// sent twice (a stream): such a request is sent once.
    fn try_clone(&self) -> Option<Self>;
}

/// An answer the layer can judge.
pub trait Judged: Sized + Send + 'static {
    /// What the caller gets.
    type Output: Send + 'static;
    /// Judges the answer, reading the body of a small problem to find its `type`, and gives
    /// back the answer whole.
    fn inspect(self, policy: Arc<RetryPolicy>) -> Inspection<Self::Output>;
    /// The answer as the caller gets it, unjudged.
    fn into_output(self) -> Self::Output;
}

impl<B: Clone> Replayable for http::Request<B> {
    fn method(&self) -> &Method {
        self.method()
    }
    fn headers_mut(&mut self) -> &mut HeaderMap {
        self.headers_mut()
    }
    fn headers(&self) -> &HeaderMap {
        self.headers()
    }
    fn try_clone(&self) -> Option<Self> {
        Some(self.clone())
    }
}

impl<B> Judged for http::Response<B>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Output = http::Response<RetryBody>;

    fn inspect(self, policy: Arc<RetryPolicy>) -> Inspection<Self::Output> {
        Box::pin(async move {
            if !needs_body(self.status(), self.headers()) {
                let verdict = judge(&policy, self.status(), self.headers(), None);
                return Ok((verdict, self.into_output()));
            }
            let (parts, body) = self.into_parts();
            let bytes = http_body_util::Limited::new(body, crate::classify::MAX_PROBLEM_BYTES)
                .collect()
                .await?
                .to_bytes();
            let verdict = judge(&policy, parts.status, &parts.headers, Some(&bytes));
            let body = Full::new(bytes)
                .map_err(|never| match never {})
                .boxed_unsync();
            Ok((verdict, http::Response::from_parts(parts, body)))
        })
    }

    fn into_output(self) -> Self::Output {
        self.map(|b| b.map_err(Into::into).boxed_unsync())
    }
}

#[cfg(feature = "reqwest")]
mod reqwest_impl {
    use super::*;

    impl Replayable for reqwest::Request {
        fn method(&self) -> &Method {
            self.method()
        }
        fn headers_mut(&mut self) -> &mut HeaderMap {
            self.headers_mut()
        }
        fn headers(&self) -> &HeaderMap {
            self.headers()
        }
        fn try_clone(&self) -> Option<Self> {
            self.try_clone()
        }
    }

    /// A reqwest answer whose problem body was read is rebuilt from its status, headers,
    /// version and bytes (its `url()` is then reqwest's placeholder).
    impl Judged for reqwest::Response {
        type Output = reqwest::Response;

        fn inspect(self, policy: Arc<RetryPolicy>) -> Inspection<Self::Output> {
            Box::pin(async move {
                if !needs_body(self.status(), self.headers()) {
                    let verdict = judge(&policy, self.status(), self.headers(), None);
                    return Ok((verdict, self));
                }
                let (status, version, headers) =
                    (self.status(), self.version(), self.headers().clone());
                let bytes = self.bytes().await?;
                let verdict = judge(&policy, status, &headers, Some(&bytes));
                let mut rebuilt = http::Response::new(bytes);
                *rebuilt.status_mut() = status;
                *rebuilt.version_mut() = version;
                *rebuilt.headers_mut() = headers;
                Ok((verdict, reqwest::Response::from(rebuilt)))
            })
        }

        fn into_output(self) -> Self::Output {
            self
        }
    }
}
