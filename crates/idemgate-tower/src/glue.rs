//! The glue between a covered HTTP request and the core lifecycle: begin, forward under the
//! lease, classify the response by the route's status rules, record the outcome.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::FutureExt;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::response::Parts;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body::Body;
use idemgate_core::integrity::check_storable;
use idemgate_core::lifecycle::{
    hash_key, principal_hash, Acquire, Answer, Begin, Holder, Outcome, Peek,
};
use idemgate_core::{
    BoxError, Fingerprint, IdempotencyStore, Lifecycle, ScopedKey, StoredResponse,
};
use tokio::sync::oneshot;

use crate::admission::fingerprint::FingerprintJob;
use crate::admission::{content_length, pass_through};
use crate::body::{buffer_up_to, chain, full, BoxBody, Buffered};
use crate::lease::{LeaseHandle, SendFailure};
use crate::limits::Ticket;
use crate::metrics::RouteMetrics;
use crate::policy::{Policy, RoutePolicy, StatusAction};
use crate::rejection::IdempotencyRejection;
use crate::replay::{headers_to_store, IDEMPOTENT_TAKEOVER};
use crate::transaction::TxStore;
use idemgate_core::redact::{store_form, StoreResponse};

mod answer;

pub(crate) use answer::answer_for;

/// Everything about a covered request that the detached task needs.
pub(crate) struct Covered {
    pub(crate) scope: ScopedKey,
    /// The route label's metric handles (its label is the template, for logs too).
    pub(crate) meters: Arc<RouteMetrics>,
    pub(crate) fingerprint: Fingerprint,
    /// What the fingerprint read, to compute it again for a record of another algorithm
    /// version. Let go once the key is acquired: it shares the request's head and body with
    /// the buffer hyper read them into, which it would otherwise keep (8 KiB, beside the one
    /// hyper reads the connection into next) while the operation runs.
    pub(crate) job: Option<Arc<FingerprintJob>>,
    pub(crate) policy: Arc<Policy>,
    pub(crate) route: Arc<RoutePolicy>,
    /// The request's hold on its per-principal limits, released when this task ends.
    pub(crate) ticket: Ticket,
    /// The store for completions inside the handler's transaction, when the layer has one.
    pub(crate) transactional: Option<TxStore>,
}

impl Covered {
    /// [`Lifecycle::peek`] for this request: the answer its key's live record gives, or
    /// the acquire to run in the detached task.
    pub(crate) async fn peek<St: IdempotencyStore>(&self, lifecycle: &Lifecycle<St>) -> Peek {
        let refingerprint = |version| refingerprint(&self.job, version);
        let plan = self.route.plan();
        lifecycle
            .peek(&self.scope, self.fingerprint, &plan, refingerprint)
            .await
    }

    fn reject(&self, r: IdempotencyRejection) -> (&'static str, Response<BoxBody>) {
        rejection(&self.meters, &self.policy.problem_type_base, r)
    }

    fn label(&self) -> &str {
        self.meters.route()
    }

    /// Logs at `warn` that this request's key is now failed (retries get `500`).
    fn failed(&self, why: &str) {
        tracing::warn!(route = %self.label(), key = %hash_key(&self.scope), principal = %principal_hash(&self.scope), why, "key failed: the operation may have run; retries get previous-attempt-failed");
    }
}

/// The fingerprint by algorithm `version` of the request `job` read, `None` when it
/// cannot be computed (or `job` was let go).
fn refingerprint(
    job: &Option<Arc<FingerprintJob>>,
    version: u16,
) -> impl Future<Output = Option<Fingerprint>> + use<> {
    let job = job.clone();
    async move { job?.run(version).await.ok() }
}

/// The outcome label of a request and its answer.
pub(crate) type Answered<E> = (&'static str, Result<Response<BoxBody>, E>);

/// Where the client's answer goes.
type Reply<E> = oneshot::Sender<Answered<E>>;

/// Steps 4 and 5, in the detached task: begin, then run and record, or answer.
pub(crate) async fn run<S, St, ResB>(
    inner: S,
    lifecycle: Lifecycle<St>,
    mut covered: Covered,
    acquire: Acquire,
    request: Box<Request<BoxBody>>,
    mut reply: Reply<S::Error>,
) where
    S: tower::Service<Request<BoxBody>, Response = Response<ResB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: SendFailure + Send + 'static,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
    St: IdempotencyStore,
{
    // Boxed, with what it reads in a block of its own: the acquire's state (the store's
    // call, a wait for the first holder) is let go before the operation runs, so the task
    // then holds only what running it needs.
    let begun = {
        let (scope, plan) = (&covered.scope, covered.route.plan());
        let job = &covered.job;
        let refingerprint = |version| refingerprint(job, version);
        // A duplicate that waits (`on_in_flight = "wait"`) stops when its client leaves.
        // While it waits it holds no per-principal in-flight slot; it takes one to run.
        let gone = reply.closed();
        let ticket = &mut covered.ticket;
        let waiting = |w| ticket.waiting(w);
        let fingerprint = covered.fingerprint;
        let begun = lifecycle.begin_waiting(
            acquire,
            scope,
            fingerprint,
            &plan,
            refingerprint,
            (gone, waiting),
        );
        Box::pin(begun).await
    };
    let rp = &covered.route;
    let answer = match begun {
        Begin::Run(holder) => {
            let outcome = if holder.takeover {
                "takeover"
            } else {
                "acquired"
            };
            covered.meters.count(outcome);
            covered.job = None;
            let tagged = (outcome, reply);
            return execute(inner, &lifecycle, &covered, holder, request, tagged).await;
        }
        Begin::Answer(Answer::Unavailable(_) | Answer::Overloaded) if rp.fail_open => {
            tracing::warn!(route = %covered.label(), "store unavailable; forwarding unrecorded (fail_open)");
            covered.meters.count("fail_open");
            let answer = pass_through(inner, *request, &covered.meters).await;
            return drop(reply.send(("fail_open", answer)));
        }
        Begin::Answer(a) => a,
    };
    let (outcome, response) = answer_for(&mut covered, answer);
    let _ = reply.send((outcome, Ok(response)));
}

/// What the upstream sent: its body buffered for the record, or left to stream.
enum Received {
    /// Not kept (released or failed status, a stream, or too large by `Content-Length`).
    Streamed(BoxBody),
    /// Read for the record (up to the route's cap).
    Buffered(Buffered),
}

/// Forwards under the holder's lease (renewed once, across the call and the reading of the
/// body), answers the client, and records the outcome.
async fn execute<S, St, ResB>(
    inner: S,
    lifecycle: &Lifecycle<St>,
    covered: &Covered,
    holder: Holder,
    mut request: Box<Request<BoxBody>>,
    (tag, reply): (&'static str, Reply<S::Error>),
) where
    S: tower::Service<Request<BoxBody>, Response = Response<ResB>>,
    S::Error: SendFailure + 'static,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
    St: IdempotencyStore,
{
    let rp = &covered.route;
    let tx = covered.transactional.clone();
    let handle = LeaseHandle::new(holder.lease.clone(), holder.takeover, tx, rp.clone());
    request.extensions_mut().insert(handle.clone());
    if holder.takeover {
        let takeover = HeaderValue::from_static("true");
        request.headers_mut().insert(IDEMPOTENT_TAKEOVER, takeover);
    }
    let cap = rp.max_stored_response_bytes;
    // A panic of the inner service (a handler's) is caught here, in the detached task:
    // the operation may have partly run, so the record fails like a `5xx`.
    let forwarded = AssertUnwindSafe(async {
        let called = pass_through(inner, *request, &covered.meters).await;
        let (parts, body) = called?.into_parts();
        // A `304` is kept as not replayable: it has no body and answers a conditional
        // `GET`/`HEAD` only (RFC 9110 §15.4.5), so it is never replayed.
        let keep = rp.action_for(parts.status, &parts.headers) == StatusAction::Store
            && parts.status != StatusCode::NOT_MODIFIED
            && !is_streaming(&parts.headers)
            && content_length(&parts.headers).is_none_or(|n| n <= cap as u64);
        let received = match keep {
            true => Received::Buffered(buffer_up_to(body, cap).await),
            false => Received::Streamed(body),
        };
        Ok((parts, received))
    });
    let Ok(forwarded) = lifecycle.hold(&holder, forwarded.catch_unwind()).await else {
        return panicked(lifecycle, covered, &holder, &handle, reply).await;
    };
    let (parts, received) = match forwarded {
        Ok((parts, received)) if handle.is_completed() => {
            let (_, answer) = record(covered, parts, received);
            return drop(reply.send((tag, Ok(answer))));
        }
        Err(e) if handle.is_completed() => return drop(reply.send(("upstream_error", Err(e)))),
        Ok(forwarded) => forwarded,
        Err(e) => {
            let outcome = match e.not_sent() {
                // The client gets `502 upstream-unreachable`.
                true => Outcome::Release {
                    status: 502,
                    retry_after_ms: None,
                },
                false => {
                    covered.failed("the upstream call failed after the request was sent");
                    Outcome::Fail
                }
            };
            let failed = ("upstream_error", Err(e));
            return settle(lifecycle, &holder, outcome, reply, failed).await;
        }
    };
    let (outcome, answer) = record(covered, parts, received);
    if matches!(outcome, Outcome::Fail) {
        covered.failed("the upstream's status is in fail_statuses, or its response broke off");
    }
    settle(lifecycle, &holder, outcome, reply, (tag, Ok(answer))).await
}

/// After a panic of the inner service: `500` `operation-panicked`, and the record failed
/// (unless the service completed it itself), so retries never run it again.
async fn panicked<St: IdempotencyStore, E>(
    lifecycle: &Lifecycle<St>,
    covered: &Covered,
    holder: &Holder,
    handle: &LeaseHandle,
    reply: Reply<E>,
) {
    let (_, answer) = covered.reject(IdempotencyRejection::OperationPanicked);
    if handle.is_completed() {
        return drop(reply.send(("upstream_error", Ok(answer))));
    }
    covered.failed("the operation panicked");
    let failed = ("upstream_error", Ok(answer));
    settle(lifecycle, holder, Outcome::Fail, reply, failed).await
}

/// The outcome to record for what the upstream sent, by the route's status rules, and the
/// response for the client.
fn record(covered: &Covered, mut parts: Parts, received: Received) -> (Outcome, Response<BoxBody>) {
    let rp = &covered.route;
    crate::replay::strip_reserved(&mut parts.headers);
    let stored = |body: Bytes, replayable: bool| {
        let whole = StoredResponse {
            status: parts.status.as_u16(),
            headers: headers_to_store(&parts.headers, &rp.replay_deny_headers),
            body,
            replayable,
            sealed_by: None,
        };
        if rp.store_response == StoreResponse::Full {
            return whole;
        }
        let encoded = parts
            .headers
            .get_all(http::header::CONTENT_ENCODING)
            .iter()
            .any(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
        let limits = (encoded, rp.max_stored_response_bytes);
        store_form(whole, rp.store_response, &rp.redact_json_pointers, limits)
    };
    let keep = |body: Bytes, replayable: bool| storable(covered.label(), stored(body, replayable));
    let (outcome, body) = match (rp.action_for(parts.status, &parts.headers), received) {
        (StatusAction::Release, r) => (released(&parts), unbuffered(r)),
        (StatusAction::Fail, r) => (Outcome::Fail, unbuffered(r)),
        (StatusAction::Store, Received::Buffered(Buffered::Complete(bytes))) => {
            (keep(bytes.clone(), true), full(bytes))
        }
        (StatusAction::Store, Received::Buffered(Buffered::Failed(e))) => {
            tracing::warn!(error = %e, route = %covered.label(), "upstream response broke off; failing the record");
            let broke = IdempotencyRejection::UpstreamResponseFailed;
            let type_base = &covered.policy.problem_type_base;
            return (Outcome::Fail, broke.into_response(type_base));
        }
        // A stream, or a body over the cap: delivered whole, kept as not replayable.
        (StatusAction::Store, r) => (keep(Bytes::new(), false), unbuffered(r)),
    };
    (outcome, Response::from_parts(parts, body))
}

/// The release of a response's key, with what its client gets: its status and its
/// `Retry-After` ([`retry_after_ms`]).
fn released(parts: &Parts) -> Outcome {
    let retry_after = parts.headers.get(http::header::RETRY_AFTER);
    Outcome::Release {
        status: parts.status.as_u16(),
        retry_after_ms: retry_after.and_then(|v| retry_after_ms(v.as_bytes())),
    }
}

/// Longest `Retry-After` kept, in ms (a day): waiting duplicates answer a longer one at once,
/// since no `max_wait` reaches it.
const MAX_RETRY_AFTER_MS: u64 = 24 * 3_600_000;

/// A `Retry-After` value (RFC 9110 section 10.2.3) in ms from now, at most a day: delay
/// seconds (digits only; more than a day, or too many to count, is a day) or an HTTP-date (a
/// date past is 0). `None` for anything else, which the RFC leaves undefined.
pub(crate) fn retry_after_ms(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        let ms = text
            .parse::<u64>()
            .map_or(u64::MAX, |s| s.saturating_mul(1000));
        return Some(ms.min(MAX_RETRY_AFTER_MS));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    let left = at
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    Some((left.as_millis() as u64).min(MAX_RETRY_AFTER_MS))
}

/// The outcome for a response the client gets whole: completed with `response` if a store
/// can keep it and read it back ([`check_storable`]); else completed as not replayable
/// (retries get `410`), without its headers if they are what cannot be kept. Never a
/// failure or a release: the operation ran and its answer was delivered.
pub(crate) fn storable(route: &str, mut response: StoredResponse) -> Outcome {
    let Err(why) = check_storable(&response) else {
        return Outcome::Complete(response);
    };
    tracing::warn!(route, status = response.status, reason = %why, "response delivered but not kept for replay");
    response.replayable = false;
    response.body = Bytes::new();
    if check_storable(&response).is_err() {
        response.headers.clear();
    }
    match check_storable(&response) {
        Ok(()) => Outcome::Complete(response),
        // Only a status outside 200-599, which no status list can name.
        Err(_) => Outcome::Fail,
    }
}

/// The body of a response whose bytes are not kept for replay, for the client.
fn unbuffered(received: Received) -> BoxBody {
    match received {
        Received::Streamed(body) => body,
        Received::Buffered(Buffered::Complete(bytes)) => full(bytes),
        Received::Buffered(Buffered::Exceeded { prefix, rest }) => chain(prefix, rest),
        Received::Buffered(Buffered::Failed(_)) => full(Bytes::new()),
    }
}

/// Records `outcome` and answers the client once the first attempt ended (it is bounded by
/// the store deadline); if it did not land, keeps recording until it does (the lifecycle
/// retries and renews the lease meanwhile), so a store blip never leaves a live holder's
/// record to lapse.
///
/// Boxed: the write's state (the store's call, its retries: about 1.5 KiB) is needed only
/// once the upstream answered, so the task waits for the upstream without it.
fn settle<'a, St: IdempotencyStore, T: 'a>(
    lifecycle: &'a Lifecycle<St>,
    holder: &'a Holder,
    outcome: Outcome,
    reply: oneshot::Sender<T>,
    answer: T,
) -> Pin<Box<impl Future<Output = ()> + 'a>> {
    Box::pin(record_outcome(lifecycle, holder, outcome, reply, answer))
}

/// [`settle`]'s work.
async fn record_outcome<St: IdempotencyStore, T>(
    lifecycle: &Lifecycle<St>,
    holder: &Holder,
    outcome: Outcome,
    reply: oneshot::Sender<T>,
    answer: T,
) {
    let pending = lifecycle.try_finish(holder, outcome).await;
    // The client may have gone; the outcome is recorded either way.
    let _ = reply.send(answer);
    if let Err(pending) = pending {
        pending.retry().await;
    }
}

/// Responses that stream by nature are delivered unbuffered and not kept.
pub(crate) fn is_streaming(headers: &HeaderMap) -> bool {
    let ct = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
    ct.is_some_and(|ct| {
        ct.trim_start()
            .to_ascii_lowercase()
            .starts_with("text/event-stream")
    })
}

/// The problem response for `r` and its outcome label, counted under `meters`.
pub(crate) fn rejection(
    meters: &RouteMetrics,
    type_base: &str,
    r: IdempotencyRejection,
) -> (&'static str, Response<BoxBody>) {
    let outcome = outcome_label(&r);
    meters.count(outcome);
    (outcome, r.into_response(type_base))
}

fn outcome_label(r: &IdempotencyRejection) -> &'static str {
    match r {
        IdempotencyRejection::RequestInFlight { .. } => "conflict",
        IdempotencyRejection::FingerprintMismatch { .. } => "mismatch",
        IdempotencyRejection::StoreUnavailable => "store_unavailable",
        IdempotencyRejection::PreviousAttemptFailed => "previous_failed",
        IdempotencyRejection::PreviousAttemptReleased { .. } => "previous_released",
        IdempotencyRejection::ResponseNotKept { .. } => "not_kept",
        IdempotencyRejection::OutcomeUnknown => "outcome_unknown",
        IdempotencyRejection::RecordCorrupt => "record_corrupt",
        IdempotencyRejection::PrincipalLimited { .. } => "limited",
        _ => "rejected",
    }
}

#[cfg(test)]
mod tests;
