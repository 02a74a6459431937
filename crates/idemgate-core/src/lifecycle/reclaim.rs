//! Cleaning up after an insert whose answer was lost (its deadline passed, or the connection
//! broke after the statement was sent): it may still have inserted a record under this
//! request's lease, although the request was answered `503` and never run. Left alone, that
//! record would block retries and then read as `outcome-unknown` for its whole TTL; it is
//! released with its own lease once the store answers.

use std::future::Future;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::outcome::Outcome;
use super::{Holder, Lifecycle};
use crate::record::{Lease, LeaseToken, RecordState, ScopedKey};
use crate::store::{IdempotencyStore, InsertOutcome, InsertRequest, StoreError};

/// Most reclaims running at once; past it a failed insert is not followed up (logged and
/// counted), so a long outage under load cannot pile up tasks.
pub(super) const MAX_RECLAIMS: usize = 1024;
/// How long the follow-up goes on.
const SEARCH_FOR: Duration = Duration::from_secs(600);
/// The first wait before looking the key up; doubled up to [`MAX_LOOK_INTERVAL`].
const FIRST_LOOK: Duration = Duration::from_millis(200);
/// The longest wait between lookups.
const MAX_LOOK_INTERVAL: Duration = Duration::from_secs(5);

impl<St: IdempotencyStore> Lifecycle<St> {
    /// Follows up an insert that failed without a clear answer: awaits `call` if it still
    /// runs (a timeout), else looks the record up; releases it if it carries `token`.
    pub(super) fn reclaim<F>(&self, call: Option<F>, key: &ScopedKey, token: LeaseToken)
    where
        F: Future<Output = Result<(InsertRequest, InsertOutcome), StoreError>> + Send + 'static,
    {
        let Ok(permit) = self.reclaims.clone().try_acquire_owned() else {
            tracing::warn!(route = %key.route, "too many failed inserts to follow up; a record may be left in progress");
            metrics::counter!("idempotency_reclaim_skipped_total").increment(1);
            return;
        };
        tokio::spawn(reclaim(self.clone(), call, key.clone(), token, permit));
    }
}

async fn reclaim<St, F>(
    lifecycle: Lifecycle<St>,
    call: Option<F>,
    key: ScopedKey,
    token: LeaseToken,
    _permit: OwnedSemaphorePermit,
) where
    St: IdempotencyStore,
    F: Future<Output = Result<(InsertRequest, InsertOutcome), StoreError>>,
{
    // While the call may still land, its answer is awaited and the key looked up in turn,
    // so an orphan is released as soon as the store answers, well before its lease lapses.
    let mut call = call.map(Box::pin);
    let until = Instant::now() + SEARCH_FOR;
    let mut delay = FIRST_LOOK;
    while Instant::now() < until {
        if let Some(pending) = call.as_mut() {
            match tokio::time::timeout(delay, pending).await {
                Ok(Ok((_, InsertOutcome::Inserted(lease)))) => {
                    return release(&lifecycle, lease).await
                }
                Ok(Ok((_, InsertOutcome::Existing { .. }))) => return,
                Ok(Err(_)) => call = None,
                Err(_) => {}
            }
        } else {
            tokio::time::sleep(delay).await;
        }
        match look(&lifecycle, &key, token).await {
            Looked::Ours(lease) => return release(&lifecycle, lease).await,
            // Not there (or another's): done, unless the call may still insert it.
            Looked::NotOurs if call.is_none() => return,
            Looked::NotOurs | Looked::NoAnswer => {}
        }
        // Many follow-ups may wait on a store that is down: poll it gently.
        delay = (delay * 2).min(MAX_LOOK_INTERVAL);
    }
}

/// Releases the orphaned record under its own lease.
async fn release<St: IdempotencyStore>(lifecycle: &Lifecycle<St>, lease: Lease) {
    let route = lease.key.route.clone();
    let holder = Holder {
        lease,
        takeover: false,
        lease_ttl: Duration::from_secs(1),
        record_deadline: Instant::now() + SEARCH_FOR,
    };
    let done = lifecycle.write(&holder, &Outcome::Release, false).await;
    tracing::info!(%route, outcome = ?done, "released the record of an insert whose answer was lost");
    metrics::counter!("idempotency_reclaimed_total").increment(1);
}

/// What one lookup of the key found.
enum Looked {
    /// The record is `in_progress` under this request's token: the lease to release it.
    Ours(Lease),
    /// No record, or one that is not this request's.
    NotOurs,
    /// The store did not answer.
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
        Err(_) => Looked::NoAnswer,
    }
}
