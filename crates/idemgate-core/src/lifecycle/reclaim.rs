//! Cleaning up after an insert whose answer was lost (its deadline passed, or the connection
//! broke after the statement was sent): it may still have inserted a record under this
//! request's lease, although the request was answered `503` and never run. Left alone, that
//! record would block retries and then read as `outcome-unknown` for its whole TTL; it is
//! released with its own lease once the store answers.
//!
//! A follow-up goes on until it knows (the record is released, or is not this request's) or
//! the record's TTL has passed, however long the store stays away ([`next_look`] spaces the
//! lookups). Past [`queue::MAX_RUNNING`] at once, follow-ups are queued, never dropped
//! ([`queue`]).

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::outcome::Outcome;
use super::{Holder, Lifecycle};
use crate::record::{Lease, LeaseToken, RecordState, ScopedKey};
use crate::store::{IdempotencyStore, InsertOutcome, InsertRequest, StoreError};

pub(super) mod queue;
use queue::Entry;
pub(super) use queue::Reclaims;

/// The first wait before looking the key up; doubled up to [`MAX_LOOK_INTERVAL`].
const FIRST_LOOK: Duration = Duration::from_millis(200);
/// The longest wait between lookups while a follow-up is young.
const MAX_LOOK_INTERVAL: Duration = Duration::from_secs(5);
/// How long a follow-up counts as young: a store back within this is noticed within
/// [`MAX_LOOK_INTERVAL`].
const YOUNG: Duration = Duration::from_secs(600);
/// The wait between lookups of an older follow-up (the store has been away for a while).
const LATE_LOOK_INTERVAL: Duration = Duration::from_secs(30);
/// The least time, after the insert's answer was lost, before "no record" counts as "it
/// never landed": a statement the store received before the connection broke may still
/// commit (a database notices a gone client only when it answers). At least 5 store
/// deadlines.
const MIN_SETTLE: Duration = Duration::from_secs(10);

/// The wait before the next lookup, after waiting `delay`, of a follow-up `age` old: 200 ms
/// doubling to 5 s for its first 10 minutes, then 30 s.
pub(super) fn next_look(delay: Duration, age: Duration) -> Duration {
    if age < YOUNG {
        (delay * 2).min(MAX_LOOK_INTERVAL)
    } else {
        LATE_LOOK_INTERVAL
    }
}

impl<St> Lifecycle<St> {
    /// True when new requests are refused before their insert: too many outcome writes
    /// pending, or the queue of follow-ups full.
    pub(super) fn overloaded(&self) -> bool {
        self.pending.full(&self.config) || self.reclaims.full()
    }

    /// Follow-ups of lost inserts (running, queued).
    #[cfg(test)]
    pub(super) fn reclaims_load(&self) -> (usize, usize) {
        self.reclaims.load()
    }
}

impl<St: IdempotencyStore> Lifecycle<St> {
    /// Follows up an insert of `key` with `token` and `record_ttl` that failed without a
    /// clear answer: awaits `call` if it still runs (a timeout), else looks the record up;
    /// releases it if it carries `token`. Queued (and `call` dropped) past [`queue::MAX_RUNNING`]
    /// follow-ups at once.
    pub(super) fn reclaim<F>(
        &self,
        call: Option<F>,
        key: &ScopedKey,
        token: LeaseToken,
        record_ttl: Duration,
    ) where
        F: Future<Output = Result<(InsertRequest, InsertOutcome), StoreError>> + Send + 'static,
    {
        let entry = Entry::new(key.clone(), token, record_ttl);
        if let Some(entry) = self.reclaims.admit(entry) {
            tokio::spawn(run(self.clone(), call, entry));
        }
    }
}

/// Runs `entry`'s follow-up, then queued ones until the queue is empty.
async fn run<St, F>(lifecycle: Lifecycle<St>, call: Option<F>, entry: Entry)
where
    St: IdempotencyStore,
    F: Future<Output = Result<(InsertRequest, InsertOutcome), StoreError>>,
{
    follow_up(&lifecycle, call, entry).await;
    while let Some(next) = lifecycle.reclaims.next() {
        follow_up(&lifecycle, None::<F>, next).await;
    }
}

async fn follow_up<St, F>(lifecycle: &Lifecycle<St>, call: Option<F>, entry: Entry)
where
    St: IdempotencyStore,
    F: Future<Output = Result<(InsertRequest, InsertOutcome), StoreError>>,
{
    // While the call may still land, its answer is awaited and the key looked up in turn,
    // so an orphan is released as soon as the store answers, well before its lease lapses.
    let mut call = call.map(Box::pin);
    let (started, mut until) = (Instant::now(), entry.until);
    let settle = (lifecycle.config.store_timeout * 5).max(MIN_SETTLE);
    // When "no record" is final: a settle after the call's answer was lost.
    let mut settled = started + settle;
    let mut delay = FIRST_LOOK;
    while Instant::now() < until {
        if let Some(pending) = call.as_mut() {
            match tokio::time::timeout(delay, pending).await {
                Ok(Ok((_, InsertOutcome::Inserted(lease)))) => {
                    return release(lifecycle, lease, until).await
                }
                Ok(Ok((_, InsertOutcome::Existing { .. }))) => return,
                // The store answered: nothing was inserted.
                Ok(Err(e)) if !e.outcome_unknown() => return,
                Ok(Err(_)) => {
                    // It may have inserted up to now: the record lives a TTL from here.
                    until = until.max(Instant::now() + entry.record_ttl);
                    settled = Instant::now() + settle;
                    call = None;
                }
                Err(_) => {}
            }
        } else {
            tokio::time::sleep(delay).await;
        }
        match look(lifecycle, &entry.key, entry.token).await {
            Looked::Ours(lease) => return release(lifecycle, lease, until).await,
            // Not there (or another's): done, unless the call may still insert it.
            Looked::NotOurs if call.is_none() && Instant::now() >= settled => return,
            Looked::NotOurs | Looked::NoAnswer => {}
        }
        // Many follow-ups may wait on a store that is down: poll it gently.
        delay = next_look(delay, started.elapsed());
    }
    tracing::info!(route = %entry.key.route, "follow-up of an insert whose answer was lost ended: the record's TTL has passed");
}

/// Releases the orphaned record under its own lease, trying until `until` (its TTL).
async fn release<St: IdempotencyStore>(lifecycle: &Lifecycle<St>, lease: Lease, until: Instant) {
    let route = lease.key.route.clone();
    let holder = Holder {
        lease,
        takeover: false,
        announce: false,
        lease_ttl: Duration::from_secs(1),
        record_deadline: until,
    };
    let done = lifecycle.write(&holder, &Outcome::UNSENT, false).await;
    tracing::info!(%route, outcome = ?done, "released the record of an insert whose answer was lost");
    metrics::counter!("idempotency_reclaimed_total").increment(1);
}

/// What one lookup of the key found.
enum Looked {
    /// The record is `in_progress` under this request's token: the lease to release it.
    Ours(Lease),
    /// No record, or one that is not this request's, or a definite error for the key (a
    /// route the store cannot hold: no insert of it can have landed), which ends the
    /// follow-up like "no record" instead of polling until the TTL.
    NotOurs,
    /// The store did not answer (or its outcome is unknown).
    NoAnswer,
}

async fn look<St: IdempotencyStore>(
    lifecycle: &Lifecycle<St>,
    key: &ScopedKey,
    token: LeaseToken,
) -> Looked {
    match lifecycle.timed("get", lifecycle.store.get(key)).await {
        Ok(Some(r)) if r.state == RecordState::InProgress && r.lease_token == Some(token) => {
            Looked::Ours(Lease {
                key: key.clone(),
                fence: r.fence,
                token,
                expires_at: r.lease_expires_at.unwrap_or(0),
            })
        }
        Ok(_) => Looked::NotOurs,
        Err(e) if !e.outcome_unknown() => Looked::NotOurs,
        Err(_) => Looked::NoAnswer,
    }
}
