//! Key events through the key service: `POST /v1/store/announce` takes an event from one
//! caller ([`idemgate_client::KeyServiceStore`] in a gateway whose duplicates wait), and
//! `POST /v1/wait` long-polls them for the others of the same namespace, so waiting on an
//! `idemgate://` store costs one open call per process, not a read per waiter and poll.
//! The public outcome calls (`/v1/complete`, `/v1/fail`, `/v1/release`) add theirs, with
//! the key id over the caller's own principal, scope and key.
//!
//! The hub is per process: the last [`KEPT`] events of every namespace, numbered. A cursor
//! is `<epoch>-<number>`, the epoch random per process, so a cursor from before a restart
//! (or from another instance behind a balancer) reads as `missed`: the caller reads its
//! waited keys again, and its slow poll covers what a lost event would have told.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::Json;
use idemgate_client::store_wire::{AnnounceBody, Done, WaitAnswer, WaitBody, MAX_EVENT_WAIT_MS};
use idemgate_client::wire::Problem;
use idemgate_core::events::KeyEvent;
use idemgate_core::{IdempotencyStore, LeaseToken};
use tokio::sync::watch;

use crate::auth::Caller;
use crate::problem::{ApiError, JsonBody};
use crate::KeyService;

/// Events kept per process (all namespaces).
pub const KEPT: usize = 4096;
/// Most events in one answer.
const MOST_PER_ANSWER: usize = 256;

/// The events of one process, numbered from 0.
#[derive(Debug)]
pub struct EventHub {
    /// Random per process: cursors of another process read as missed.
    epoch: u64,
    /// Number, namespace and text of the last [`KEPT`] events, oldest first.
    kept: Mutex<VecDeque<(u64, Arc<str>, String)>>,
    /// The number the next event gets; changed (or only marked changed, by
    /// [`EventHub::close`]) to wake the waits.
    next: watch::Sender<u64>,
    closed: AtomicBool,
}

impl Default for EventHub {
    fn default() -> Self {
        Self {
            epoch: LeaseToken::random().0.unsigned_abs() >> 12,
            kept: Mutex::new(VecDeque::new()),
            next: watch::Sender::new(0),
            closed: AtomicBool::new(false),
        }
    }
}

impl EventHub {
    /// Adds `event` for the callers of `namespace`.
    pub fn publish(&self, namespace: &Arc<str>, event: &KeyEvent) {
        let mut kept = self.lock();
        let n = *self.next.borrow();
        kept.push_back((n, namespace.clone(), event.encode()));
        if kept.len() > KEPT {
            kept.pop_front();
        }
        self.next.send_replace(n + 1);
    }

    /// Ends every wait under way at once, and those to come (a process that stops).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.next.send_modify(|_| {});
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, Arc<str>, String)>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where `after` starts in this process's numbering, and whether events were missed
    /// since: another epoch, a number not given out yet, or one no longer kept.
    fn start(&self, after: Option<&str>) -> (u64, bool) {
        let kept = self.lock();
        let next = *self.next.borrow();
        let oldest = kept.front().map_or(next, |e| e.0);
        let Some(after) = after else {
            return (next, false);
        };
        let parsed = after.split_once('-').and_then(|(epoch, at)| {
            let epoch = u64::from_str_radix(epoch, 16).ok()?;
            Some((epoch, at.parse::<u64>().ok()?))
        });
        match parsed {
            Some((epoch, at)) if epoch == self.epoch && at <= next => (at, at < oldest),
            _ => (next, true),
        }
    }

    /// The events of `namespace` numbered `at` or later (at most [`MOST_PER_ANSWER`]), and
    /// the number after the last one looked at.
    fn since(&self, namespace: &str, at: u64) -> (Vec<String>, u64) {
        let kept = self.lock();
        let mut events = Vec::new();
        let mut last = at;
        for (n, ns, text) in kept.iter().skip_while(|e| e.0 < at) {
            if events.len() == MOST_PER_ANSWER {
                break;
            }
            last = n + 1;
            if **ns == *namespace {
                events.push(text.clone());
            }
        }
        (events, last)
    }

    /// The events of `namespace` after `after` (a cursor; `None` starts, at once), waiting
    /// up to `wait` for one.
    pub async fn wait(&self, namespace: &str, after: Option<&str>, wait: Duration) -> WaitAnswer {
        let mut next = self.next.subscribe();
        let (mut at, missed) = self.start(after);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            next.borrow_and_update();
            let (events, last) = self.since(namespace, at);
            at = last;
            let closed = self.closed.load(Ordering::Acquire);
            if !events.is_empty() || missed || after.is_none() || closed {
                return self.answer(events, at, missed);
            }
            let changed = tokio::time::timeout_at(deadline, next.changed()).await;
            if !matches!(changed, Ok(Ok(()))) {
                return self.answer(events, at, false);
            }
        }
    }

    fn answer(&self, events: Vec<String>, at: u64, missed: bool) -> WaitAnswer {
        WaitAnswer {
            cursor: format!("{:x}-{at}", self.epoch),
            events,
            missed,
        }
    }
}

/// `POST /v1/store/announce`.
#[utoipa::path(post, path = "/v1/store/announce", tag = "store", request_body = AnnounceBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Sent to the callers of `/v1/wait` in this namespace", body = Done),
        (status = 400, description = "`invalid-request`: not an event", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn announce<St: IdempotencyStore>(
    State(s): State<Arc<KeyService<St>>>,
    caller: Caller,
    JsonBody(b): JsonBody<AnnounceBody>,
) -> Result<Json<Done>, ApiError> {
    let event = KeyEvent::decode(&b.event)
        .ok_or_else(|| ApiError::invalid("event", "not a key event (see the API's docs)"))?;
    s.events.publish(&caller.namespace, &event);
    Ok(Json(Done { ok: true }))
}

/// `POST /v1/wait`: long-polls the key events of the caller's namespace.
#[utoipa::path(post, path = "/v1/wait", tag = "keys", request_body = WaitBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Events (none when `wait_ms` passed first)", body = WaitAnswer),
        (status = 400, description = "`invalid-request`", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn wait<St: IdempotencyStore>(
    State(s): State<Arc<KeyService<St>>>,
    caller: Caller,
    JsonBody(b): JsonBody<WaitBody>,
) -> Result<Json<WaitAnswer>, ApiError> {
    if b.wait_ms > MAX_EVENT_WAIT_MS {
        return Err(ApiError::invalid("wait_ms", "must be at most 30000"));
    }
    let wait = Duration::from_millis(b.wait_ms);
    let answer = s
        .events
        .wait(&caller.namespace, b.after.as_deref(), wait)
        .await;
    Ok(Json(answer))
}

#[cfg(test)]
mod tests;
