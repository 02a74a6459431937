//! Duplicates that wait for the outcome of an in-flight key ([`InFlightPolicy::Wait`]).
//!
//! A waiter holds no store connection: it waits on its key's slot in this process
//! ([`registry`]), whose one watcher task reads the record when an event comes (this
//! process's outcome writes, other processes' through [`IdempotencyStore::listen`]), when a
//! waiter arrives, and on a slow poll (at least once a lease TTL, and at most
//! [`IdempotencyStore::event_poll`] apart), so a lost event delays an answer, never hangs it.
//!
//! What a waiter answers:
//! - the record settled (completed, failed, resolved): what a retry gets now;
//! - the lease lapsed: what a retry gets (`outcome-unknown` by default; a route that takes
//!   over acquires, as its retry would);
//! - the holder released the key (known only from the release's event): the waiter acquires
//!   it through the same atomic insert as a new key, not before the released answer's
//!   `Retry-After` and at most once per wait; one waiter wins and runs it, the others wait
//!   on; a waiter whose one try is spent answers the holder's released status;
//! - the record vanished without a release (TTL, eviction, failover loss, an operator):
//!   [`Answer::InFlight`], as without waiting: it is never run by a waiter;
//! - `max_wait` passed, or `max_waiters` wait already: [`Answer::InFlight`].
//!
//! [`InFlightPolicy::Wait`]: super::InFlightPolicy::Wait

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::peek::Acquire;
use super::{Answer, Begin, Lifecycle, RoutePlan};
use crate::events::{EventSink, KeyEvent, KeyId};
use crate::fingerprint::Fingerprint;
use crate::record::ScopedKey;
use crate::store::IdempotencyStore;

mod registry;
mod waiter;
mod watcher;

use registry::Place;
pub(crate) use registry::Waiters;
use waiter::Wait;

/// How long a record that vanished is given for its release's event to arrive (it may
/// follow the delete by a store round trip, or a notification's delivery) before the
/// waiters answer [`Answer::InFlight`].
const GONE_GRACE: Duration = Duration::from_millis(1000);

/// What one stretch of waiting came to.
enum Waited {
    Answer(Answer),
    /// Acquire the released key (this process's claim of the release).
    Acquire,
    /// Take over a lapsed lease, as a retry would on a route that takes over.
    TakeOver,
}

impl<St: IdempotencyStore> Lifecycle<St> {
    /// [`Lifecycle::begin_after`], then, on a route whose duplicates wait
    /// ([`RoutePlan::waits`]) and while the key is in flight, waits for its outcome as the
    /// module says, up to `plan.max_wait`. `gone` completes when nobody awaits the answer
    /// any more (the client left): the wait then ends at once with [`Answer::InFlight`].
    /// Only the waiting is cut short by `gone`, never an acquire. `waiting(true)` is called
    /// when the wait starts, `waiting(false)` before the waiter acquires a released key (a
    /// front door's per-caller in-flight count leaves out waiters).
    pub async fn begin_waiting<F>(
        &self,
        acquire: Acquire,
        key: &ScopedKey,
        fingerprint: Fingerprint,
        plan: &RoutePlan,
        refingerprint: impl Fn(u16) -> F,
        (gone, waiting): (impl Future<Output = ()>, impl FnMut(bool)),
    ) -> Begin
    where
        F: Future<Output = Option<Fingerprint>>,
    {
        let begun = self
            .begin_after(acquire, key, fingerprint, plan, &refingerprint)
            .await;
        if !plan.waits() || !matches!(begun, Begin::Answer(Answer::InFlight { .. })) {
            return begun;
        }
        self.wait_in_flight(key, fingerprint, plan, refingerprint, (gone, waiting))
            .await
    }

    /// After an acquire of `key` answered [`Answer::InFlight`]: waits for its outcome up to
    /// `plan.max_wait`, as the module says (whatever `plan.on_in_flight`), and answers what
    /// a retry after it would, or [`Begin::Run`] when this caller acquired a released key.
    /// `gone` and `waiting` are as for [`Lifecycle::begin_waiting`].
    pub async fn wait_in_flight<F>(
        &self,
        key: &ScopedKey,
        fingerprint: Fingerprint,
        plan: &RoutePlan,
        refingerprint: impl Fn(u16) -> F,
        (gone, mut waiting): (impl Future<Output = ()>, impl FnMut(bool)),
    ) -> Begin
    where
        F: Future<Output = Option<Fingerprint>>,
    {
        let started = Instant::now();
        let Some(place) = self.join(key) else {
            metrics::counter!(crate::counters::WAITS, "outcome" => "refused").increment(1);
            return Begin::Answer(Answer::InFlight {
                retry_after_ms: 1000,
            });
        };
        let mut wait = Wait::new(place, started + plan.max_wait);
        let mut gone = std::pin::pin!(gone);
        waiting(true);
        let begun = loop {
            let waited = wait
                .until_settled(
                    key,
                    fingerprint,
                    plan,
                    (&refingerprint, self.keyring()),
                    gone.as_mut(),
                )
                .await;
            let begun = match waited {
                Waited::Answer(answer) => break Begin::Answer(answer),
                Waited::Acquire => {
                    waiting(false);
                    let begun = self
                        .acquire_for(key, fingerprint, plan, &refingerprint)
                        .await;
                    waiting(!matches!(begun, Begin::Run(_)));
                    begun
                }
                Waited::TakeOver => {
                    waiting(false);
                    let begun = self.begin(key, fingerprint, plan, &refingerprint).await;
                    waiting(!matches!(begun, Begin::Run(_)));
                    begun
                }
            };
            // Lost the acquire to another's run: wait on that run.
            if !matches!(begun, Begin::Answer(Answer::InFlight { .. }))
                || Instant::now() >= wait.deadline
            {
                break begun;
            }
            wait.lost_acquire();
            wait.place.slot.poke.notify_one();
        };
        let outcome = match &begun {
            _ if wait.left => "left",
            Begin::Run(_) => "run",
            Begin::Answer(Answer::InFlight { .. }) => "in_flight",
            Begin::Answer(Answer::Replay(_)) => "replay",
            Begin::Answer(Answer::Released { .. }) => "released",
            Begin::Answer(_) => "answered",
        };
        metrics::counter!(crate::counters::WAITS, "outcome" => outcome).increment(1);
        metrics::histogram!("idempotency_wait_duration_seconds")
            .record(started.elapsed().as_secs_f64());
        begun
    }

    /// The acquire of a released key by the waiter that claimed it: first a read, so a key
    /// another process ran again since (its release's event may still be on its way) is
    /// waited on rather than inserted a second time; then the insert-or-get of a new key.
    async fn acquire_for<F>(
        &self,
        key: &ScopedKey,
        fingerprint: Fingerprint,
        plan: &RoutePlan,
        refingerprint: &impl Fn(u16) -> F,
    ) -> Begin
    where
        F: Future<Output = Option<Fingerprint>>,
    {
        match self.timed("wait_read", self.store.get(key)).await {
            Ok(None) => self.begin(key, fingerprint, plan, refingerprint).await,
            Ok(Some(_)) | Err(_) => Begin::Answer(Answer::InFlight {
                retry_after_ms: 1000,
            }),
        }
    }

    /// A place among the waiters of `key`, its watcher started with the slot, and the
    /// store's events listened to from the first waiter on; `None` past `max_waiters`.
    fn join(&self, key: &ScopedKey) -> Option<Place> {
        let (place, new) = self.waiters.join(KeyId::of(key), self.config.max_waiters)?;
        if new {
            tokio::spawn(watcher::watch(
                self.clone(),
                key.clone(),
                place.slot.clone(),
            ));
        } else {
            place.slot.poke.notify_one();
        }
        if self.waiters.listening.set(()).is_ok() {
            let (store, sink) = (self.store.clone(), EventSink::new(&self.waiters));
            tokio::spawn(async move { store.listen(sink).await });
        }
        Some(place)
    }

    /// For front doors that write outcomes to the store themselves (the key service's
    /// `complete`, `fail` and `release`): tells the waiters of `lease`'s key that its outcome
    /// landed, in this process and in others that use the store
    /// ([`IdempotencyStore::announce`]: one more store call where the store has events).
    /// `released`: the key was released, with the status and `Retry-After` (ms) its caller
    /// answered.
    pub async fn outcome_landed(
        &self,
        lease: &crate::record::Lease,
        released: Option<(u16, Option<u64>)>,
    ) {
        let kind = match released {
            Some((status, retry_after_ms)) => {
                crate::events::EventKind::Released(crate::events::Released {
                    lease: crate::events::Released::lease_id(lease),
                    status,
                    retry_after_ms,
                })
            }
            None => crate::events::EventKind::Written,
        };
        let event = KeyEvent {
            key: KeyId::of(&lease.key),
            kind,
        };
        self.announce(event, true).await;
    }

    /// Tells the waiters of `event`'s key, in this process and (when `others`) in others.
    pub(super) async fn announce(&self, event: KeyEvent, others: bool) {
        self.waiters.deliver(event);
        if others {
            if let Err(e) = self.timed("announce", self.store.announce(&event)).await {
                // The others' slow poll covers it; a release then reads as a vanished record.
                tracing::warn!(error = %crate::report::error_text(&e), "key event not sent to other processes");
            }
        }
    }
}

impl<St> Lifecycle<St> {
    /// Ends every wait under way in this process with [`Answer::InFlight`] (`409`), for a
    /// process that stops: its drain then does not wait up to `max_wait`, and no waiter
    /// starts a run. Waits that begin afterwards are not ended.
    pub fn end_waits(&self) {
        self.waiters.end_waits();
    }

    /// Duplicates waiting in this process, on every key.
    pub fn waiters(&self) -> usize {
        self.waiters.count()
    }
}
