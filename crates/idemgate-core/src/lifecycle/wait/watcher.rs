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
        // A poked read (a waiter joined, an event came) is always published: the waiter
        // that poked waits for it. A polled read only when it is news.
        let poked = tokio::select! {
            _ = slot.poke.notified() => true,
            _ = tokio::time::sleep(next) => false,
            _ = slot.seen.closed() => return,
        };
        let known = slot.seen.borrow().last_release();
        next = match read(&lifecycle, &key).await {
            Ok(Some((record, now))) => {
                let lease_left = record
                    .lease_expires_at
                    .map_or(0, |end| end.saturating_sub(now).max(0) as u64);
                // Polls wake the waiters only with news: a record or a lapse they have not
                // seen (1,000 idle waiters woken by each unchanged read cost 1.6 % of a core).
                slot.seen.send_if_modified(|seen| {
                    if !poked && same_news(&seen.read, &record, now) {
                        return false;
                    }
                    seen.read = Read::Record(Arc::new(record), now);
                    seen.read_after = known;
                    true
                });
                poll.min(Duration::from_millis(lease_left) + PAST_LEASE)
            }
            Ok(None) => {
                slot.seen.send_if_modified(|seen| {
                    let news = poked || !matches!(seen.read, Read::Gone);
                    seen.read = Read::Gone;
                    seen.read_after = known;
                    news
                });
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

/// True when a read of `record` at `now` tells the waiters nothing `last` did not: the same
/// record (creation, fence, lease, state, TTL) on the same side of its lease's end and of its
/// TTL. A record without a lease end is always news (its end depends on the route's
/// `max_lease`, which the watcher does not know).
fn same_news(last: &Read, record: &IdempotencyRecord, now: UnixMillis) -> bool {
    let Read::Record(old, then) = last else {
        return false;
    };
    let phase = |r: &IdempotencyRecord, at: UnixMillis| {
        (at < r.expires_at, r.lease_expires_at.map(|end| at < end))
    };
    record.lease_expires_at.is_some()
        && old.created_at == record.created_at
        && old.fence == record.fence
        && old.state == record.state
        && old.lease_token == record.lease_token
        && old.lease_expires_at == record.lease_expires_at
        && old.expires_at == record.expires_at
        && old.completed_at == record.completed_at
        && phase(old, *then) == phase(record, now)
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::lifecycle::{Begin, Lifecycle, LifecycleConfig, RoutePlan};
    use crate::testing::{fp, unique_key};
    use crate::MemoryStore;

    /// Polls of an unchanged in-flight record wake no waiter; the lease's end does, once.
    #[tokio::test(start_paused = true)]
    async fn idle_waiters_are_woken_by_news_only() {
        let lifecycle = Lifecycle::new(Arc::new(MemoryStore::new()), LifecycleConfig::default());
        let (key, plan) = (
            unique_key("alice"),
            RoutePlan {
                lease_ttl: Duration::from_secs(10),
                ..RoutePlan::default()
            },
        );
        let begun = lifecycle
            .begin(&key, fp(1), &plan, |_| async { None })
            .await;
        assert!(matches!(begun, Begin::Run(_)), "{begun:?}");
        let place = lifecycle.join(&key).expect("a place");
        let mut seen = place.seen.clone();
        let mut wakes = 0;
        let count = async {
            while seen.changed().await.is_ok() {
                wakes += 1;
            }
        };
        // 8 s: 32 polls of 250 ms, all of the same record, inside its 10 s lease.
        let _ = tokio::time::timeout(Duration::from_secs(8), count).await;
        assert_eq!(wakes, 1, "the first read only");
        let count = async {
            while seen.changed().await.is_ok() {
                wakes += 1;
            }
        };
        // Past the lease's end (10 s) and 4 s of polls after it.
        let _ = tokio::time::timeout(Duration::from_secs(6), count).await;
        assert_eq!(wakes, 2, "the first read and the lapse");
    }
}
