//! Holding a lease while the operation runs, and writing its outcome until it lands.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use super::pending::PendingGuard;
use super::{Holder, Lifecycle};
use crate::events::{EventKind, KeyEvent, KeyId, Released};
use crate::record::{Lease, RecordState, StoredResponse};
use crate::store::{IdempotencyStore, OutcomeWrite, StoreError};

/// First wait between outcome write attempts; doubled up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(25);
/// Longest wait between outcome write attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// What the operation's result does to the record (the front door classifies it, e.g. by
/// the route's status rules).
#[derive(Debug)]
pub enum Outcome {
    /// Store the response: retries replay it.
    Complete(StoredResponse),
    /// The attempt failed after it may have run: retries are refused.
    Fail,
    /// Nothing was done: delete the record so the same key may run again. Duplicates that
    /// wait on the key ([`super::InFlightPolicy::Wait`]) learn what the holder's client got.
    Release {
        /// The status the holder's client got (`503` when nothing was forwarded).
        status: u16,
        /// Its `Retry-After`, in ms: no waiter runs the key again before it.
        retry_after_ms: Option<u64>,
    },
}

impl Outcome {
    /// The release of a request that was never forwarded: its client got `503`.
    pub const UNSENT: Self = Self::Release {
        status: 503,
        retry_after_ms: None,
    };

    fn name(&self) -> &'static str {
        self.write().name()
    }

    /// The store write that records it.
    fn write(&self) -> OutcomeWrite<'_> {
        match self {
            Self::Complete(r) => OutcomeWrite::Complete(r),
            Self::Fail => OutcomeWrite::Fail,
            Self::Release { .. } => OutcomeWrite::Release,
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Self::Complete(r) => {
                r.body.len()
                    + r.headers
                        .iter()
                        .map(|(n, v)| n.len() + v.len())
                        .sum::<usize>()
            }
            _ => 0,
        }
    }
}

/// An outcome write whose first attempt did not land (from [`Lifecycle::try_finish`]).
#[derive(Debug)]
pub struct PendingOutcome<'a, St> {
    lifecycle: &'a Lifecycle<St>,
    holder: &'a Holder,
    outcome: Outcome,
    guard: PendingGuard,
}

pin_project_lite::pin_project! {
    /// The future of [`Lifecycle::hold`]: `operation` polled first, then the renewal.
    struct Held<F, R> {
        #[pin]
        operation: F,
        #[pin]
        renew: R,
    }
}

impl<F: Future, R: Future<Output = std::convert::Infallible>> Future for Held<F, R> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        if let Poll::Ready(out) = this.operation.poll(cx) {
            return Poll::Ready(out);
        }
        match this.renew.poll(cx) {
            Poll::Ready(never) => match never {},
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<St: IdempotencyStore> PendingOutcome<'_, St> {
    /// Retries the write, renewing the lease meanwhile, until it lands (see
    /// [`Lifecycle::finish`]).
    ///
    /// # Cancel safety
    /// As for [`Lifecycle::finish`]: a write dropped before it landed is logged and counted.
    pub async fn retry(mut self) -> Finished {
        let (lifecycle, holder) = (self.lifecycle, self.holder);
        let write = lifecycle.write(holder, &self.outcome, true);
        let finished = lifecycle.hold(holder, write).await;
        self.guard.settle();
        finished
    }
}

fn lease_lost(lease: &Lease, outcome: &Outcome) -> Finished {
    metrics::counter!("idempotency_lease_lost_total").increment(1);
    tracing::warn!(op = outcome.name(), route = %lease.key.route, key = %super::hash_key(&lease.key), principal = %super::principal_hash(&lease.key), "outcome refused: the lease is no longer held");
    Finished::LeaseLost
}

/// How [`Lifecycle::finish`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finished {
    /// The outcome is stored.
    Landed,
    /// The record no longer carries this lease (taken over, or removed by an operator):
    /// nothing was written.
    LeaseLost,
    /// The store refused or missed every attempt until the record's TTL ran out; the
    /// record stays `in_progress` (retries get `outcome-unknown`) until it expires.
    Expired,
    /// A take-over's "nothing done" (a release): nothing was written. The holder it took
    /// over from may have run the operation, so the record is never deleted for a fresh,
    /// unmarked run: it stays `in_progress` under this fence until its lease lapses, and
    /// the next request takes it over again, marked (found by the protocol model,
    /// `crates/idemgate-model`).
    LeftToLapse,
}

impl<St: IdempotencyStore> Lifecycle<St> {
    /// Runs `operation` while renewing the holder's lease every third of its TTL (sooner
    /// after a failed renewal), so the lease only lapses when its holder died or lost the
    /// store for longer than the lease.
    ///
    /// # Cancel safety
    /// Dropping the future stops renewing; the lease then lapses and retries get
    /// `outcome-unknown` (or a takeover, per route). Front doors run it in a task of its own.
    ///
    /// # Size
    /// The future holds `operation` once, beside a renewal of a few hundred bytes: the
    /// store's call is boxed while it runs (once per third of the TTL). An `async fn` would
    /// hold `operation` twice (its argument, and the pinned copy it polls), and every
    /// request in flight carries this future.
    pub fn hold<'a, F: Future + 'a>(
        &'a self,
        holder: &'a Holder,
        operation: F,
    ) -> impl Future<Output = F::Output> + 'a {
        Held {
            operation,
            renew: self.renew_while_held(holder),
        }
    }

    /// Renews `holder`'s lease every third of its TTL (a tenth, at least 50 ms, after a
    /// failed renewal) until the lease is found lost; never completes.
    async fn renew_while_held(&self, holder: &Holder) -> std::convert::Infallible {
        let ttl = holder.lease_ttl;
        let mut wait = ttl / 3;
        loop {
            tokio::time::sleep(wait).await;
            let renewal = Box::pin(self.timed("renew", self.store.renew(&holder.lease, ttl)));
            match renewal.await {
                Ok(_) => wait = ttl / 3,
                Err(StoreError::LeaseLost) => {
                    metrics::counter!("idempotency_lease_lost_total").increment(1);
                    tracing::warn!(route = %holder.lease.key.route, key = %super::hash_key(&holder.lease.key), principal = %super::principal_hash(&holder.lease.key), "lease lost while the operation ran");
                    return std::future::pending().await;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "lease renewal failed; retrying");
                    wait = (ttl / 10).max(Duration::from_millis(50));
                }
            }
        }
    }

    /// Writes the outcome, renewing the lease meanwhile, and retries failed writes with
    /// backoff (25 ms doubling to 1 s) until one lands, the lease is found stale, or the
    /// record's TTL has passed. Outcome writes are never abandoned while the holder lives.
    ///
    /// # Cancel safety
    /// A write dropped before it landed (shutdown's deadline) is logged and counted
    /// (`idempotency_outcome_abandoned_total{reason="shutdown"}`).
    pub async fn finish(&self, holder: &Holder, outcome: Outcome) -> Finished {
        match self.try_finish(holder, outcome).await {
            Ok(finished) => finished,
            Err(pending) => pending.retry().await,
        }
    }

    /// One attempt at the outcome write, under the store deadline: for front doors that
    /// answer their client before retrying. `Err` holds the write, counted as pending
    /// ([`LifecycleConfig::max_pending_outcomes`](super::LifecycleConfig)); its
    /// [`PendingOutcome::retry`] goes on as [`Lifecycle::finish`] does.
    pub async fn try_finish<'a>(
        &'a self,
        holder: &'a Holder,
        outcome: Outcome,
    ) -> Result<Finished, PendingOutcome<'a, St>> {
        if holder.takeover
            && matches!(outcome, Outcome::Release { .. })
            && !super::planted::takeover_release_deletes()
        {
            tracing::info!(route = %holder.lease.key.route, key = %super::hash_key(&holder.lease.key), "a take-over's forward did nothing; the record is kept, to lapse, since the earlier holder may have run");
            metrics::counter!(crate::counters::TAKEOVER_RELEASES_KEPT).increment(1);
            return Ok(Finished::LeftToLapse);
        }
        let outcome = self.sealed(holder, outcome);
        let (written, made) = self.attempt(holder, &outcome).await;
        match written {
            Ok(()) => Ok(self.landed_now(holder, &outcome, made, false).await),
            Err(StoreError::LeaseLost) => Ok(lease_lost(&holder.lease, &outcome)),
            Err(e) => {
                tracing::warn!(op = outcome.name(), error = %e, "outcome write failed; retrying");
                let guard = self.pending.enter(outcome.name(), outcome.bytes());
                Err(PendingOutcome {
                    lifecycle: self,
                    holder,
                    outcome,
                    guard,
                })
            }
        }
    }

    /// `outcome` with its response sealed for the holder's record, when responses are
    /// sealed at rest: once per outcome, so every retry of the write stores the same bytes.
    fn sealed(&self, holder: &Holder, outcome: Outcome) -> Outcome {
        match outcome {
            Outcome::Complete(r) => Outcome::Complete(self.seal_response(&holder.lease, r)),
            outcome => outcome,
        }
    }

    /// The event that tells of `outcome`, if anyone is to hear it: waiters in this process,
    /// or on a route that waits, in others (`None` spares the hashing).
    fn event_of(&self, holder: &Holder, outcome: &Outcome) -> Option<KeyEvent> {
        if !holder.announce && self.waiters() == 0 {
            return None;
        }
        let kind = match *outcome {
            Outcome::Release {
                status,
                retry_after_ms,
            } => EventKind::Released(Released {
                lease: Released::lease_id(&holder.lease),
                status,
                retry_after_ms,
            }),
            _ => EventKind::Written,
        };
        let key = KeyId::of(&holder.lease.key);
        Some(KeyEvent { key, kind })
    }

    /// After `outcome` landed: tells the key's waiters ([`super::wait`]) in this process
    /// and, when `others` (a write that did not carry the event), in others. `made`: the
    /// event the write made, if it made one (hashing the key once per write).
    async fn landed_now(
        &self,
        holder: &Holder,
        outcome: &Outcome,
        made: Option<KeyEvent>,
        others: bool,
    ) -> Finished {
        if let Some(event) = made.or_else(|| self.event_of(holder, outcome)) {
            self.announce(event, others && holder.announce).await;
        }
        Finished::Landed
    }

    /// One outcome write; on a route that waits, with its event for other processes
    /// ([`IdempotencyStore::write_announced`]), which it returns.
    async fn attempt(
        &self,
        holder: &Holder,
        outcome: &Outcome,
    ) -> (Result<(), StoreError>, Option<KeyEvent>) {
        let lease = &holder.lease;
        if let Some(event) = holder
            .announce
            .then(|| self.event_of(holder, outcome))
            .flatten()
        {
            let write = outcome.write();
            let written = self.store.write_announced(lease, write, &event);
            return (self.timed(write.name(), written).await, Some(event));
        }
        let written = match outcome {
            Outcome::Complete(r) => self.timed("complete", self.store.complete(lease, r)).await,
            Outcome::Fail => self.timed("fail", self.store.fail(lease)).await,
            Outcome::Release { .. } => self.timed("release", self.store.release(lease)).await,
        };
        (written, None)
    }

    /// Retries `outcome` until it lands. `failed_before`: an earlier attempt got no answer
    /// (it may have landed nevertheless), so the first retry waits the first backoff.
    pub(super) async fn write(
        &self,
        holder: &Holder,
        outcome: &Outcome,
        failed_before: bool,
    ) -> Finished {
        let lease = &holder.lease;
        let mut delay = FIRST_BACKOFF;
        let mut ambiguous = failed_before;
        if failed_before {
            tokio::time::sleep(delay).await;
            delay *= 2;
        }
        for attempt in 1.. {
            let (written, made) = self.attempt(holder, outcome).await;
            match written {
                Ok(()) => return self.landed_now(holder, outcome, made, false).await,
                // An earlier attempt landed, its event perhaps not sent.
                Err(StoreError::LeaseLost) if ambiguous && self.landed(lease, outcome).await => {
                    return self.landed_now(holder, outcome, made, true).await
                }
                Err(StoreError::LeaseLost) => return lease_lost(lease, outcome),
                Err(e) => {
                    ambiguous = true;
                    if Instant::now() + delay >= holder.record_deadline {
                        tracing::error!(op = outcome.name(), error = %e, attempt, "outcome write gave up: the record's TTL has passed");
                        metrics::counter!("idempotency_outcome_abandoned_total", "reason" => "ttl")
                            .increment(1);
                        return Finished::Expired;
                    }
                    tracing::warn!(op = outcome.name(), error = %e, attempt, "outcome write failed; retrying");
                    metrics::counter!("idempotency_outcome_retries_total").increment(1);
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(MAX_BACKOFF);
                }
            }
        }
        unreachable!("the attempt counter does not end")
    }

    /// After a stale-lease refusal that followed an unanswered attempt: did that attempt
    /// land? Only a takeover changes the fence, so the same fence in the outcome's state
    /// means it did.
    async fn landed(&self, lease: &Lease, outcome: &Outcome) -> bool {
        match self.timed("get", self.store.get(&lease.key)).await {
            Ok(Some(r)) => {
                r.fence == lease.fence
                    && match outcome {
                        Outcome::Complete(_) => r.state == RecordState::Completed,
                        Outcome::Fail => r.state == RecordState::Failed,
                        Outcome::Release { .. } => false,
                    }
            }
            Ok(None) => matches!(outcome, Outcome::Release { .. }),
            Err(_) => false,
        }
    }
}
