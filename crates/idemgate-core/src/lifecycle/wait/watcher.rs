//! The watcher of one waited key: reads its record for all its waiters.

use std::sync::Arc;
use std::time::Duration;

use super::registry::{Read, Slot};
use crate::lifecycle::Lifecycle;
use crate::record::{now_millis, IdempotencyRecord, ScopedKey, UnixMillis};
use crate::store::{IdempotencyStore, Peeked, StoreError};

/// Wait after a failed read before the next, and the least wait between two polls.
const RETRY: Duration = Duration::from_millis(250);
/// Read this long after a lease's end, so a read after it sees it lapsed.
const PAST_LEASE: Duration = Duration::from_millis(25);

/// Reads `key` at once, then on each poke (an event, a new waiter) and at least every
/// [`IdempotencyStore::event_poll`] (sooner when the record's lease ends before), publishing
/// each read to the slot, until the slot has no waiter left.
pub(super) async fn watch<St: IdempotencyStore>(
    lifecycle: Lifecycle<St>,
    key: ScopedKey,
    slot: Arc<Slot>,
) {
    let poll = lifecycle.store.event_poll().max(RETRY);
    let mut next = Duration::ZERO;
    loop {
        tokio::select! {
            _ = slot.poke.notified() => {}
            _ = tokio::time::sleep(next) => {}
            _ = slot.seen.closed() => return,
        }
        next = match read(&lifecycle, &key).await {
            Ok(Some((record, now))) => {
                let lease_left = record
                    .lease_expires_at
                    .map_or(0, |end| end.saturating_sub(now).max(0) as u64);
                let record = Arc::new(record);
                slot.seen
                    .send_modify(|seen| seen.read = Read::Record(record, now));
                poll.min(Duration::from_millis(lease_left) + PAST_LEASE)
            }
            Ok(None) => {
                slot.seen.send_modify(|seen| seen.read = Read::Gone);
                // Gone: soon read again, for the run that may follow a release.
                RETRY
            }
            Err(e) => {
                tracing::debug!(error = %crate::report::error_text(&e), "a waited key's read failed; reading again");
                RETRY
            }
        };
    }
}

/// The live record of `key` and the time of the read: the store's clock where the store
/// reads ahead ([`IdempotencyStore::peek`]), this process's otherwise (a skew of a few ms
/// moves a lapsed lease's answer by as much).
async fn read<St: IdempotencyStore>(
    lifecycle: &Lifecycle<St>,
    key: &ScopedKey,
) -> Result<Option<(IdempotencyRecord, UnixMillis)>, StoreError> {
    let peeked = lifecycle
        .timed("wait_read", lifecycle.store.peek(key))
        .await?;
    match peeked {
        Peeked::Live { record, now } => Ok(Some((record, now))),
        Peeked::Absent => Ok(None),
        Peeked::NotRead => {
            let record = lifecycle
                .timed("wait_read", lifecycle.store.get(key))
                .await?;
            Ok(record.map(|r| (r, now_millis())))
        }
    }
}
