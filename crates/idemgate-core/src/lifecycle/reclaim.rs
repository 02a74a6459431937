//! Cleaning up after an insert whose answer was lost to the store deadline: it may still
//! have inserted a record under this request's lease, although the request was answered
//! `503` and never run. Left alone, that record would block retries and then read as
//! `outcome-unknown`; it is released with its own lease once the store answers.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::outcome::Outcome;
use super::{Holder, Lifecycle};
use crate::record::{Lease, LeaseToken, RecordState, ScopedKey};
use crate::store::{IdempotencyStore, InsertOutcome, InsertRequest, StoreError};

/// How long the search for an orphaned record goes on after the store call ended.
const SEARCH_FOR: Duration = Duration::from_secs(600);

/// Waits for the timed-out `call`; releases what it inserted, or (if it failed without an
/// answer) looks for a record carrying `token` and releases that.
pub(super) async fn reclaim<St, F>(
    lifecycle: Lifecycle<St>,
    call: F,
    key: ScopedKey,
    token: LeaseToken,
) where
    St: IdempotencyStore,
    F: Future<Output = Result<(InsertRequest, InsertOutcome), StoreError>>,
{
    let lease = match call.await {
        Ok((_, InsertOutcome::Inserted(lease))) => Some(lease),
        Ok((_, InsertOutcome::Existing { .. })) => return,
        Err(_) => search(&lifecycle, &key, token).await,
    };
    if let Some(lease) = lease {
        let holder = Holder {
            lease,
            takeover: false,
            lease_ttl: Duration::from_secs(1),
            record_deadline: Instant::now() + SEARCH_FOR,
        };
        let done = lifecycle.write(&holder, &Outcome::Release).await;
        tracing::info!(route = %key.route, outcome = ?done, "released the record of an acquire that timed out");
        metrics::counter!("idempotency_reclaimed_total").increment(1);
    }
}

/// Reads the key until it answers: the lease if the record is `in_progress` under `token`.
async fn search<St: IdempotencyStore>(
    lifecycle: &Lifecycle<St>,
    key: &ScopedKey,
    token: LeaseToken,
) -> Option<Lease> {
    let until = Instant::now() + SEARCH_FOR;
    let mut delay = Duration::from_millis(50);
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
                delay = (delay * 2).min(Duration::from_secs(2));
            }
        }
    }
    None
}
