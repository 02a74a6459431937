//! Key events through the key service ([`IdempotencyStore::announce`] and
//! [`IdempotencyStore::listen`] of [`KeyServiceStore`]): `POST /v1/store/announce` sends
//! one; one long-poll of `POST /v1/wait` per process receives the others' events of the
//! token's namespace.
//!
//! The key service relays events within one of its processes: behind a balancer over
//! several, an event announced to one is not seen by pollers of another, and their waiters
//! see the outcome at their slow poll ([`IdempotencyStore::event_poll`], 2 s while the
//! long-poll runs, 250 ms while it does not).
//!
//! [`IdempotencyStore::announce`]: idemgate_core::IdempotencyStore::announce
//! [`IdempotencyStore::listen`]: idemgate_core::IdempotencyStore::listen
//! [`IdempotencyStore::event_poll`]: idemgate_core::IdempotencyStore::event_poll

use std::sync::atomic::Ordering;
use std::time::Duration;

use idemgate_core::events::{EventSink, KeyEvent};
use idemgate_core::store::Result;

use super::{store_error, KeyServiceStore};
use crate::store_wire::{AnnounceBody, Done, WaitAnswer, WaitBody};

/// How long one long-poll waits for an event, in ms; the call's timeout is the client's
/// timeout more.
const LONG_POLL_MS: u64 = 20_000;
/// Wait before calling again after a failed call.
const RECONNECT: Duration = Duration::from_secs(1);

impl KeyServiceStore {
    /// `POST /v1/store/announce`.
    pub(super) async fn publish(&self, event: &KeyEvent) -> Result<()> {
        let body = AnnounceBody {
            event: event.encode(),
        };
        let _: Done = self.call("/v1/store/announce", &body).await?;
        Ok(())
    }

    /// Long-polls `/v1/wait` until `sink` is no longer live, calling again after a failure
    /// (see the module).
    pub(super) async fn long_poll(&self, sink: EventSink) {
        while sink.is_live() {
            match self.relay(&sink).await {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "key events: the key service's /v1/wait failed; waiters poll");
                }
            }
            self.listening.store(false, Ordering::Relaxed);
            tokio::time::sleep(RECONNECT).await;
        }
        self.listening.store(false, Ordering::Relaxed);
    }

    /// Hands every event to `sink` until a call fails (`Err`) or `sink` dies (`Ok`).
    async fn relay(&self, sink: &EventSink) -> Result<()> {
        let mut answer = self.wait_call(None, 0).await?;
        self.listening.store(true, Ordering::Relaxed);
        // Events between the last call that failed and this start are lost.
        if !sink.missed() {
            return Ok(());
        }
        loop {
            answer = self.wait_call(Some(answer.cursor), LONG_POLL_MS).await?;
            for text in &answer.events {
                match KeyEvent::decode(text) {
                    Some(event) if !sink.deliver(event) => return Ok(()),
                    Some(_) => {}
                    None => tracing::debug!(text, "key events: not an event"),
                }
            }
            if (answer.missed && !sink.missed()) || !sink.is_live() {
                return Ok(());
            }
        }
    }

    async fn wait_call(&self, after: Option<String>, wait_ms: u64) -> Result<WaitAnswer> {
        let body = WaitBody { after, wait_ms };
        let within = Duration::from_millis(wait_ms) + self.client.timeout();
        let call = self.client.post_within("/v1/wait", &body, within);
        call.await.map_err(store_error)
    }
}
