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
/// How long a timed-out store call is awaited before the record is looked for instead.
const AWAIT_CALL: Duration = Duration::from_secs(30);
/// How long the search for an orphaned record goes on.
const SEARCH_FOR: Duration = Duration::from_secs(600);

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
    // The call's own answer, if it comes in time.
    let mut call = call.map(Box::pin);
    if let Some(pending) = call.as_mut() {
        match tokio::time::timeout(AWAIT_CALL, pending).await {
            Ok(Ok((_, InsertOutcome::Inserted(lease)))) => return release(&lifecycle, lease).await,
            Ok(Ok((_, InsertOutcome::Existing { .. }))) => return,
            Ok(Err(_)) => call = None,
            Err(_) => {} // still running: look, then keep waiting
        }
    }
    if let Some(lease) = search(&lifecycle, &key, token).await {
        return release(&lifecycle, lease).await;
    }
    let late = match call {
        Some(pending) => tokio::time::timeout(SEARCH_FOR, pending).await,
        None => return,
    };
    if let Ok(Ok((_, InsertOutcome::Inserted(lease)))) = late {
        release(&lifecycle, lease).await;
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

/// Reads the key until the store answers: the lease if the record is `in_progress` under
/// `token`.
async fn search<St: IdempotencyStore>(
    lifecycle: &Lifecycle<St>,
    key: &ScopedKey,
    token: LeaseToken,
) -> Option<Lease> {
    let until = Instant::now() + SEARCH_FOR;
    let mut delay = Duration::from_millis(200);
    while Instant::now() < until {
        match lifecycle.timed("get", lifecycle.store.get(key)).await {
            Ok(Some(r)) if r.state == RecordState::InProgress && r.lease_token == Some(token) => {
                return Some(Lease {
                    key: key.clone(),
                    fence: r.fence,
                    token,
                    expires_at: r.lease_expires_at.unwrap_or(0),
                })
            }
            Ok(_) => return None,
            Err(_) => {
                tokio::time::sleep(delay).await;
                // Many follow-ups may wait on a store that is down: poll it gently.
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
    None
}
