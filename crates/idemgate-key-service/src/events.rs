//! Key events through the key service: `POST /v1/store/announce` takes an event from one
//! caller ([`idemgate_client::KeyServiceStore`] in a gateway whose duplicates wait), and
//! `POST /v1/wait` long-polls them for the others of the same namespace, so waiting on an
//! `idemgate://` store costs one open call per process, not a read per waiter and poll.
//! The public outcome calls (`/v1/complete`, `/v1/fail`, `/v1/release`) add theirs, with
//! the key id over the caller's own principal, scope and key.
//!
//! The hub is per process: the last [`KEPT`] events of each namespace, numbered per
//! namespace. A cursor is `<epoch>-<number>`, the epoch random per process, so a cursor from before a restart
//! (or from another instance behind a balancer) reads as `missed`: the caller reads its
//! waited keys again, and its slow poll covers what a lost event would have told.

use std::collections::{HashMap, VecDeque};
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

/// Events kept per namespace.
pub const KEPT: usize = 4096;
/// Most events in one answer.
const MOST_PER_ANSWER: usize = 256;

/// The events of one process, by namespace (namespaces are the configured clients', so
/// their number is bounded), each numbered from 0: one namespace's traffic neither shows in
/// another's cursors nor pushes another's events out.
#[derive(Debug)]
pub struct EventHub {
    /// Random per process: cursors of another process read as missed.
    epoch: u64,
    rings: Mutex<HashMap<Arc<str>, Arc<Ring>>>,
    closed: AtomicBool,
}

/// One namespace's last [`KEPT`] events.
#[derive(Debug)]
struct Ring {
    /// Number and text, oldest first.
    kept: Mutex<VecDeque<(u64, String)>>,
    /// The number the next event gets; changed (or only marked changed, by
    /// [`EventHub::close`]) to wake the waits.
    next: watch::Sender<u64>,
}

impl Default for EventHub {
    fn default() -> Self {
        Self {
            epoch: LeaseToken::random().0.unsigned_abs() >> 12,
            rings: Mutex::default(),
            closed: AtomicBool::new(false),
        }
    }
}

/// `after` is not a cursor `/v1/wait` gave out: `<epoch, lowercase hex>-<number>`.
#[derive(Debug)]
pub struct BadCursor;

impl EventHub {
    /// Adds `event` for the callers of `namespace`.
    pub fn publish(&self, namespace: &Arc<str>, event: &KeyEvent) {
        let ring = self.ring(namespace);
        let mut kept = lock(&ring.kept);
        let n = *ring.next.borrow();
        kept.push_back((n, event.encode()));
        if kept.len() > KEPT {
            kept.pop_front();
        }
        ring.next.send_replace(n + 1);
    }

    /// Ends every wait under way at once, and those to come (a process that stops).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        for ring in lock(&self.rings).values() {
            ring.next.send_modify(|_| {});
        }
    }

    fn ring(&self, namespace: &str) -> Arc<Ring> {
        let mut rings = lock(&self.rings);
        if let Some(ring) = rings.get(namespace) {
            return ring.clone();
        }
        let ring = Arc::new(Ring {
            kept: Mutex::default(),
            next: watch::Sender::new(0),
        });
        rings.insert(namespace.into(), ring.clone());
        ring
    }

    /// The events of `namespace` after `after` (a cursor; `None` starts, at once), waiting
    /// up to `wait` for one.
    ///
    /// # Errors
    /// [`BadCursor`] when `after` is not the form of a cursor (a well-formed cursor of
    /// another process, or one no longer kept, reads as missed).
    pub async fn wait(
        &self,
        namespace: &str,
        after: Option<&str>,
        wait: Duration,
    ) -> Result<WaitAnswer, BadCursor> {
        let ring = self.ring(namespace);
        let mut next = ring.next.subscribe();
        let (mut at, missed) = match after {
            None => (*next.borrow(), false),
            Some(after) => ring.start(self.epoch, parse(after).ok_or(BadCursor)?),
        };
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            next.borrow_and_update();
            let (events, last) = ring.since(at);
            at = last;
            let closed = self.closed.load(Ordering::Acquire);
            if !events.is_empty() || missed || after.is_none() || closed {
                return Ok(self.answer(events, at, missed));
            }
            let changed = tokio::time::timeout_at(deadline, next.changed()).await;
            if !matches!(changed, Ok(Ok(()))) {
                return Ok(self.answer(events, at, false));
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

impl Ring {
    /// Where the cursor `(epoch, at)` starts, and whether events were missed since: another
    /// process's epoch, a number not given out yet, or one no longer kept.
    fn start(&self, epoch: u64, (their_epoch, at): (u64, u64)) -> (u64, bool) {
        let kept = lock(&self.kept);
        let next = *self.next.borrow();
        let oldest = kept.front().map_or(next, |e| e.0);
        match their_epoch == epoch && at <= next {
            true => (at, at < oldest),
            false => (next, true),
        }
    }

    /// The events numbered `at` or later (at most [`MOST_PER_ANSWER`]), and the number
    /// after the last one.
    fn since(&self, at: u64) -> (Vec<String>, u64) {
        let kept = lock(&self.kept);
        let first = kept.front().map_or(at, |e| e.0.max(at));
        let events: Vec<_> = kept
            .iter()
            .skip_while(|e| e.0 < first)
            .take(MOST_PER_ANSWER)
            .map(|(_, text)| text.clone())
            .collect();
        let last = first + events.len() as u64;
        (events, last)
    }
}

/// `<epoch>-<number>`: 1 to 16 lowercase hex digits, then 1 to 20 decimal digits, neither
/// with a leading zero.
fn parse(cursor: &str) -> Option<(u64, u64)> {
    let (epoch, at) = cursor.split_once('-')?;
    let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    // As `answer` writes them: no leading zero.
    let bare = |s: &str| s == "0" || !s.starts_with('0');
    let epoch_ok = (1..=16).contains(&epoch.len()) && epoch.bytes().all(hex) && bare(epoch);
    let at_ok = (1..=20).contains(&at.len()) && at.bytes().all(|b| b.is_ascii_digit()) && bare(at);
    if !(epoch_ok && at_ok) {
        return None;
    }
    Some((u64::from_str_radix(epoch, 16).ok()?, at.parse().ok()?))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
        (status = 400, description = "`invalid-request` (also an `after` that is not a cursor)", body = Problem, content_type = "application/problem+json"),
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
        .await
        .map_err(|BadCursor| {
            ApiError::invalid("after", "not a cursor of /v1/wait (null to start)")
        })?;
    Ok(Json(answer))
}

#[cfg(test)]
mod tests;
