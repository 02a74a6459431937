//! [`RetryPolicy`]: which requests get a key, how long to try, how to wait.

use std::time::Duration;

use http::{HeaderName, Method};

/// How the retrying layer behaves. [`RetryPolicy::default`] suits an API behind idemgate's
/// defaults.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// The key header. Defaults to `Idempotency-Key`
    /// (draft-ietf-httpapi-idempotency-key-header §2).
    pub header_name: HeaderName,
    /// Methods that get a key and are retried. Defaults to `POST`, `PATCH`. Requests with
    /// other methods, and requests whose body cannot be replayed, are sent once.
    pub methods: Vec<Method>,
    /// Longest wait for one attempt's response head; past it the attempt counts as a
    /// timeout and is retried with the same key. Defaults to 10 s.
    pub attempt_timeout: Duration,
    /// Time allowed for all attempts of one logical request; no attempt or wait starts past
    /// it. Defaults to 30 s. Keep it well under the route's record TTL.
    pub deadline: Duration,
    /// Most attempts of one logical request. Defaults to 10.
    pub max_attempts: u32,
    /// First backoff after a failure without `Retry-After`; doubled after each, with full
    /// jitter (a uniform wait between half and all of it). Defaults to 100 ms.
    pub base_backoff: Duration,
    /// Largest backoff, and the most a `Retry-After` is obeyed. Defaults to 5 s.
    pub max_backoff: Duration,
    /// Prefix of idemgate's problem `type` URIs (the gateway's `problem_type_base`):
    /// `urn:idemgate:problem:` (default) or a documentation URL, whose types end in
    /// `#<name>`.
    pub problem_type_base: String,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            header_name: HeaderName::from_static("idempotency-key"),
            methods: vec![Method::POST, Method::PATCH],
            attempt_timeout: Duration::from_secs(10),
            deadline: Duration::from_secs(30),
            max_attempts: 10,
            base_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            problem_type_base: "urn:idemgate:problem:".into(),
        }
    }
}

impl RetryPolicy {
    /// The name of an idemgate problem `type` (`request-in-flight`), or `None` when the type
    /// is not one of idemgate's under [`RetryPolicy::problem_type_base`].
    pub fn problem_name<'a>(&self, problem_type: &'a str) -> Option<&'a str> {
        let rest = problem_type.strip_prefix(self.problem_type_base.as_str())?;
        match self.problem_type_base.ends_with(':') {
            true => Some(rest),
            false => rest.strip_prefix('#'),
        }
    }

    /// The wait before attempt `attempt + 1` (`attempt` ≥ 1 failed so far): `Retry-After`
    /// when the answer gave one (capped at `max_backoff`), else the jittered exponential
    /// backoff.
    pub fn wait(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(after) = retry_after {
            // A little jitter, so that clients told the same second do not come back at once.
            let jitter = self.base_backoff.mul_f64(rand::random::<f64>() * 0.5);
            return after.min(self.max_backoff) + jitter;
        }
        let exp = self
            .base_backoff
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
            .min(self.max_backoff);
        exp.mul_f64(0.5 + rand::random::<f64>() * 0.5)
    }
}
