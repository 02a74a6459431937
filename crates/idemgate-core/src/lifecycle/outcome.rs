//! Holding a lease while the operation runs, and writing its outcome until it lands.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::{Holder, Lifecycle};
use crate::record::{Lease, RecordState, StoredResponse};
use crate::store::{IdempotencyStore, StoreError};

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
    /// Nothing was done: delete the record so the same key may run again.
    Release,
}

impl Outcome {
    fn name(&self) -> &'static str {
        match self {
            Self::Complete(_) => "complete",
            Self::Fail => "fail",
            Self::Release => "release",
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
}

impl<St: IdempotencyStore> Lifecycle<St> {
    /// Runs `operation` while renewing the holder's lease every third of its TTL (sooner
    /// after a failed renewal), so the lease only lapses when its holder died or lost the
    /// store for longer than the lease.
    ///
    /// # Cancel safety
    /// Dropping the future stops renewing; the lease then lapses and retries get
    /// `outcome-unknown` (or a takeover, per route). Front doors run it in a task of its own.
    pub async fn hold<F: Future>(&self, holder: &Holder, operation: F) -> F::Output {
        self.renewing(holder, operation).await
    }

    /// Writes the outcome, renewing the lease meanwhile, and retries failed writes with
    /// backoff (25 ms doubling to 1 s) until one lands, the lease is found stale, or the
    /// record's TTL has passed. Outcome writes are never abandoned while the holder lives.
    ///
    /// # Cancel safety
    /// A write dropped before it landed (shutdown's deadline) is logged and counted
    /// (`idempotency_outcome_abandoned_total{reason="shutdown"}`).
    pub async fn finish(&self, holder: &Holder, outcome: Outcome) -> Finished {
        let mut guard = self.pending.enter(outcome.bytes());
        guard.what = outcome.name();
        let finished = self.renewing(holder, self.write(holder, &outcome)).await;
        guard.settle();
        finished
    }

    pub(super) async fn write(&self, holder: &Holder, outcome: &Outcome) -> Finished {
        let lease = &holder.lease;
        let mut delay = FIRST_BACKOFF;
        // Set once an attempt failed without an answer: it may have landed nevertheless.
        let mut ambiguous = false;
        for attempt in 1.. {
            let written = match outcome {
                Outcome::Complete(r) => self.timed("complete", self.store.complete(lease, r)).await,
                Outcome::Fail => self.timed("fail", self.store.fail(lease)).await,
                Outcome::Release => self.timed("release", self.store.release(lease)).await,
            };
            match written {
                Ok(()) => return Finished::Landed,
                Err(StoreError::LeaseLost) if ambiguous && self.landed(lease, outcome).await => {
                    return Finished::Landed
                }
                Err(StoreError::LeaseLost) => {
                    metrics::counter!("idempotency_lease_lost_total").increment(1);
                    tracing::warn!(op = outcome.name(), route = %lease.key.route, "outcome refused: the lease is no longer held");
                    return Finished::LeaseLost;
                }
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
                        Outcome::Release => false,
                    }
            }
            Ok(None) => matches!(outcome, Outcome::Release),
            Err(_) => false,
        }
    }

    async fn renewing<F: Future>(&self, holder: &Holder, fut: F) -> F::Output {
        let ttl = holder.lease_ttl;
        let renew = async {
            let mut wait = ttl / 3;
            loop {
                tokio::time::sleep(wait).await;
                match self
                    .timed("renew", self.store.renew(&holder.lease, ttl))
                    .await
                {
                    Ok(_) => wait = ttl / 3,
                    Err(StoreError::LeaseLost) => {
                        metrics::counter!("idempotency_lease_lost_total").increment(1);
                        tracing::warn!(route = %holder.lease.key.route, "lease lost while the operation ran");
                        return std::future::pending().await;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "lease renewal failed; retrying");
                        wait = (ttl / 10).max(Duration::from_millis(50));
                    }
                }
            }
        };
        tokio::pin!(fut);
        tokio::select! {
            biased;
            out = &mut fut => out,
            never = renew => never,
        }
    }
}
