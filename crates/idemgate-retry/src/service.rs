//! [`IdempotentRetryLayer`] and [`IdempotentRetry`]: the retry loop.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::HeaderValue;
use tokio::time::Instant;
use tower::{Service, ServiceExt};

use crate::classify::Verdict;
use crate::exchange::{Judged, Replayable};
use crate::{BoxError, RetryPolicy};

/// Wraps an HTTP client service in [`IdempotentRetry`].
#[derive(Debug, Clone, Default)]
pub struct IdempotentRetryLayer {
    policy: Arc<RetryPolicy>,
}

impl IdempotentRetryLayer {
    /// A layer with `policy`.
    pub fn new(policy: RetryPolicy) -> Self {
        Self {
            policy: Arc::new(policy),
        }
    }
}

impl<S> tower::Layer<S> for IdempotentRetryLayer {
    type Service = IdempotentRetry<S>;
    fn layer(&self, inner: S) -> Self::Service {
        IdempotentRetry {
            inner,
            policy: self.policy.clone(),
        }
    }
}

/// A client service that sends each covered request (`POST`, `PATCH`) as one logical
/// operation: it attaches one `Idempotency-Key` (a UUID v4, unless the request has one
/// already, which is kept), and retries with the same key and the same bytes on connection
/// errors, attempt timeouts, idemgate's `409` `request-in-flight` (after `Retry-After`),
/// `503`, `429` `principal-limited` and `502` `upstream-unreachable`, with jittered
/// exponential backoff, until an answer is final, `max_attempts` or the deadline.
///
/// A final answer is handed back as it came: the API's answer (fresh, or replayed with
/// `Idempotent-Replayed: true`, whatever its status: an upstream's own `409` is final), or
/// one of idemgate's final problems, among them `500` `outcome-unknown` and
/// `previous-attempt-failed`, on which it stops: the first attempt may have run once, and
/// only the resource can tell. When the attempts or the deadline run out, the last retryable
/// answer is handed back, or [`RetryError::GaveUp`] (with the key) when there was none.
#[derive(Debug, Clone)]
pub struct IdempotentRetry<S> {
    inner: S,
    policy: Arc<RetryPolicy>,
}

/// Why a logical request got no answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RetryError {
    /// Every attempt failed without an answer (connection errors, timeouts) until
    /// `max_attempts` or the deadline. The operation may have run once under `key`: retry
    /// later with that key, or check the resource.
    #[error("no answer after {attempts} attempt(s) with idempotency key {key}: {source}")]
    GaveUp {
        /// Attempts made.
        attempts: u32,
        /// The key every attempt carried.
        key: String,
        /// The last attempt's error.
        #[source]
        source: BoxError,
    },
    /// A request sent once (not covered, or its body cannot be sent twice) failed.
    #[error("request failed: {0}")]
    Send(#[source] BoxError),
}

/// An attempt got no response head within `attempt_timeout`.
#[derive(Debug, thiserror::Error)]
#[error("no response within the attempt timeout ({0:?})")]
pub struct AttemptTimedOut(pub std::time::Duration);

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, Req> Service<Req> for IdempotentRetry<S>
where
    Req: Replayable + Send + 'static,
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Judged,
    S::Error: Into<BoxError>,
{
    type Response = <S::Response as Judged>::Output;
    type Error = RetryError;
    type Future = BoxFuture<Result<Self::Response, RetryError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Each attempt waits for the inner service's readiness itself.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let inner = self.inner.clone();
        let policy = self.policy.clone();
        Box::pin(run(inner, policy, req))
    }
}

/// What the last attempt left.
enum Last<O> {
    Answer(O),
    Error(BoxError),
}

async fn run<S, Req>(
    mut inner: S,
    policy: Arc<RetryPolicy>,
    mut req: Req,
) -> Result<<S::Response as Judged>::Output, RetryError>
where
    Req: Replayable + Send + 'static,
    S: Service<Req> + Send,
    S::Response: Judged,
    S::Error: Into<BoxError>,
{
    if !policy.methods.contains(req.method()) || req.try_clone().is_none() {
        let sent = inner.oneshot(req).await;
        return sent
            .map(Judged::into_output)
            .map_err(|e| RetryError::Send(e.into()));
    }
    let key = ensure_key(&policy, &mut req);
    let deadline = Instant::now() + policy.deadline;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let copy = req.try_clone().expect("checked before the first attempt");
        let limit = policy
            .attempt_timeout
            .min(deadline.saturating_duration_since(Instant::now()));
        let sent = tokio::time::timeout(limit, async {
            let ready = inner.ready().await.map_err(Into::into)?;
            ready.call(copy).await.map_err(Into::into)
        })
        .await;
        let (retry_after, last) = match sent {
            Err(_) => (None, Last::Error(AttemptTimedOut(limit).into())),
            Ok(Err(e)) => (None, Last::Error(e)),
            // A problem body that never ends is an attempt that timed out.
            Ok(Ok(resp)) => match tokio::time::timeout(limit, resp.inspect(policy.clone())).await {
                Ok(Ok((Verdict::Final, answer))) => return Ok(answer),
                Ok(Ok((Verdict::Retry(after), answer))) => (after, Last::Answer(answer)),
                Ok(Err(e)) => (None, Last::Error(e)),
                Err(_) => (None, Last::Error(AttemptTimedOut(limit).into())),
            },
        };
        let wait = policy.wait(attempt, retry_after);
        if attempt >= policy.max_attempts || Instant::now() + wait >= deadline {
            return match last {
                Last::Answer(answer) => Ok(answer),
                Last::Error(source) => Err(RetryError::GaveUp {
                    attempts: attempt,
                    key,
                    source,
                }),
            };
        }
        tokio::time::sleep(wait).await;
    }
}

/// The request's key, or a new UUID v4 set on it.
fn ensure_key<Req: Replayable>(policy: &RetryPolicy, req: &mut Req) -> String {
    if let Some(existing) = req.headers().get(&policy.header_name) {
        return String::from_utf8_lossy(existing.as_bytes()).into_owned();
    }
    let key = uuid_v4(rand::random());
    let value = HeaderValue::from_str(&key).expect("a UUID is a header value");
    req.headers_mut().insert(policy.header_name.clone(), value);
    key
}

/// A random (version 4) UUID, RFC 9562 §5.4, in its hyphenated lower-case form.
fn uuid_v4(random: [u8; 16]) -> String {
    let mut b = random;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn uuid_v4_has_its_version_and_variant() {
        let key = super::uuid_v4([0xff; 16]);
        assert_eq!(key, "ffffffff-ffff-4fff-bfff-ffffffffffff");
        let key = super::uuid_v4([0; 16]);
        assert_eq!(key, "00000000-0000-4000-8000-000000000000");
    }
}
