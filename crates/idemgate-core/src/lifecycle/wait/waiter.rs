//! One waiter: what it makes of its key's news ([`Seen`]).
//!
//! A waiter follows one chain of leases: the lease of the in-flight record it first reads,
//! then, after a release of that lease it acted on, the lease of the run that followed. A
//! release of any other lease (a record deleted and run again by someone else while the
//! first still runs) is not its business: the record it waited on vanished, and it answers
//! as for a vanished record. Of each release it acts on, one waiter per process claims the
//! acquire ([`Slot::claim`]); the others wait on that run.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::Instant;

use super::registry::{Place, Read, Seen};
use super::{Waited, GONE_GRACE};
use crate::engine::{decide, Decision};
use crate::events::Released;
use crate::fingerprint::Fingerprint;
use crate::lifecycle::peek::{fingerprint_as, opened, settled};
use crate::lifecycle::{Answer, RoutePlan};
use crate::record::{IdempotencyRecord, RecordState, ScopedKey};
use crate::seal::Keyring;

/// One waiter's state.
pub(super) struct Wait {
    pub(super) place: Place,
    pub(super) deadline: Instant,
    /// This wait acted on a release already (its one try is spent).
    tried: bool,
    /// The number of the last release this waiter looked at (or that predates it).
    releases_seen: u64,
    /// The lease id ([`Released::lease_id`]) of the in-flight record waited on, once read.
    waited_on: Option<u64>,
    /// A release of the lease waited on (or a takeover) was acted on: the next in-flight
    /// lease is the rerun's, and is waited on in turn.
    follows: bool,
    /// The lease id of the release this wait acted on: a lease is released once, so
    /// another release of it (a forged or repeated event) is not acted on.
    acted_on: Option<u64>,
    /// The client left (for the metric).
    pub(super) left: bool,
}

/// Why a stretch of waiting stopped before news came.
enum Stop {
    Deadline,
    Left,
    Closing,
}

impl Wait {
    pub(super) fn new(place: Place, deadline: Instant) -> Self {
        let releases_seen = place.seen.borrow().last_release();
        Self {
            place,
            deadline,
            tried: false,
            releases_seen,
            waited_on: None,
            follows: false,
            acted_on: None,
            left: false,
        }
    }

    /// After a claimed acquire found the key taken by another's rerun, or lost the insert:
    /// that rerun is waited on.
    pub(super) fn lost_acquire(&mut self) {
        self.follows = true;
    }

    /// Waits until the key's record settles the request, or says to acquire it.
    pub(super) async fn until_settled<F>(
        &mut self,
        key: &ScopedKey,
        fingerprint: Fingerprint,
        plan: &RoutePlan,
        (refingerprint, keyring): (&impl Fn(u16) -> F, Option<&Keyring>),
        mut gone: Pin<&mut impl Future<Output = ()>>,
    ) -> Waited
    where
        F: Future<Output = Option<Fingerprint>>,
    {
        let in_flight = || {
            Waited::Answer(Answer::InFlight {
                retry_after_ms: 1000,
            })
        };
        let mut vanished: Option<Instant> = None;
        loop {
            let until = vanished.map_or(self.deadline, |at| (at + GONE_GRACE).min(self.deadline));
            if let Err(stop) = self.news(until, gone.as_mut()).await {
                self.left = matches!(stop, Stop::Left);
                return in_flight();
            }
            let seen = self.place.seen.borrow_and_update().clone();
            if let Some(waited) = self.released(&seen, gone.as_mut()).await {
                return waited;
            }
            let (record, now) = match seen.read {
                Read::Pending => continue,
                // After a release it acted on, the rerun's record is still to come.
                Read::Gone if self.follows => continue,
                Read::Gone => {
                    vanished.get_or_insert_with(Instant::now);
                    continue;
                }
                Read::Record(record, now) => (record, now),
            };
            vanished = None;
            let fp = fingerprint_as(&record, fingerprint, (refingerprint, keyring)).await;
            match decide(Some(&record), &fp, now, plan) {
                Decision::InFlight { .. } if self.follow(&record) => continue,
                // Run by another lease without a release of the one waited on: the record
                // waited on vanished.
                Decision::InFlight { .. } => return in_flight(),
                Decision::Takeover => {
                    self.follows = true;
                    return Waited::TakeOver;
                }
                // Expired by its TTL while waited on: vanished without a release.
                Decision::Insert => return in_flight(),
                decision => match opened(keyring, (*record).clone(), decision) {
                    Err(e) => {
                        let detail = crate::report::error_text(&e);
                        tracing::error!(route = %key.route, %detail, "stored record is corrupt; not replayed");
                        return Waited::Answer(Answer::Corrupt);
                    }
                    Ok(record) => match settled(key, record, decision) {
                        Some(answer) => return Waited::Answer(answer),
                        None => return in_flight(),
                    },
                },
            }
        }
    }

    /// Waits for the slot's next news; `Err` when `until` passed, the client left or the
    /// process stops waiting ([`super::Lifecycle::end_waits`]).
    async fn news(
        &mut self,
        until: Instant,
        gone: Pin<&mut impl Future<Output = ()>>,
    ) -> Result<(), Stop> {
        let place = &mut self.place;
        let generation = place.generation;
        tokio::select! {
            changed = place.seen.changed() => changed.map_err(|_| Stop::Closing),
            _ = tokio::time::sleep_until(until) => Err(Stop::Deadline),
            _ = gone => Err(Stop::Left),
            _ = place.closing.wait_for(|g| *g != generation) => Err(Stop::Closing),
        }
    }

    /// True when `record`'s lease is the one waited on (or now becomes it).
    fn follow(&mut self, record: &IdempotencyRecord) -> bool {
        let Some(token) = record.lease_token else {
            return true;
        };
        let id = Released::lease_id_of(token, record.fence);
        match self.waited_on {
            Some(w) if w == id => true,
            Some(_) if !self.follows => false,
            _ => {
                self.waited_on = Some(id);
                self.follows = false;
                true
            }
        }
    }

    /// What the releases newer than the last one looked at mean for this waiter, in the
    /// order they came: `None` when it waits on (another's lease, or another waiter of this
    /// process acquires it).
    async fn released(
        &mut self,
        seen: &Seen,
        mut gone: Pin<&mut impl Future<Output = ()>>,
    ) -> Option<Waited> {
        let last = seen.last_release();
        for (n, released) in seen.releases_after(self.releases_seen) {
            if seen.read_after < n {
                return None; // the read that follows the release is still to come
            }
            self.releases_seen = n;
            if contradicts(&seen.read, released.lease) {
                // Read after the release: still held by the released lease (a forged or
                // misdirected event), or settled (its answer is the record's, whatever
                // came before). The record is what counts.
                continue;
            }
            let rerun_released = n < last;
            if let Some(waited) = self
                .release(n, released, rerun_released, gone.as_mut())
                .await
            {
                return Some(waited);
            }
        }
        None
    }

    /// What release `n` means for this waiter (see [`Wait::released`]). `superseded`: a
    /// later release is known already (the rerun of this one ended released too).
    async fn release(
        &mut self,
        n: u64,
        released: Released,
        superseded: bool,
        mut gone: Pin<&mut impl Future<Output = ()>>,
    ) -> Option<Waited> {
        // Someone else's lease, while the one waited on was not released: not this chain.
        // Or the lease whose release this wait acted on already: a lease is released once.
        if (self.waited_on.is_some_and(|w| w != released.lease) && !self.follows)
            || self.acted_on == Some(released.lease)
        {
            return None;
        }
        let answer = Waited::Answer(Answer::Released {
            status: released.status,
            retry_after_ms: released.retry_after_ms,
        });
        if std::mem::replace(&mut self.tried, true) {
            return Some(answer);
        }
        self.acted_on = Some(released.lease);
        self.follows = true;
        if superseded {
            return None; // its rerun was released too: that release answers
        }
        let wait = Duration::from_millis(released.retry_after_ms.unwrap_or(0));
        let at = Instant::now() + wait;
        if at > self.deadline {
            return Some(answer); // nobody here runs it again within the wait
        }
        if !self.place.slot.claim(n) {
            return None; // another waiter here acquires it: wait on its run
        }
        if wait > Duration::ZERO {
            if let Err(stop) = self.news_until(at, gone.as_mut()).await {
                self.left = matches!(stop, Stop::Left);
                return Some(Waited::Answer(Answer::InFlight {
                    retry_after_ms: 1000,
                }));
            }
            // Released again meanwhile (another process reran it): this try is spent.
            if self.place.seen.borrow().last_release() > n {
                return Some(answer);
            }
        }
        Some(Waited::Acquire)
    }

    /// Sleeps until `at` (news in between is left for later), unless the client leaves or
    /// the process stops waiting.
    async fn news_until(
        &mut self,
        at: Instant,
        gone: Pin<&mut impl Future<Output = ()>>,
    ) -> Result<(), Stop> {
        let place = &mut self.place;
        let generation = place.generation;
        tokio::select! {
            _ = tokio::time::sleep_until(at) => Ok(()),
            _ = gone => Err(Stop::Left),
            _ = place.closing.wait_for(|g| *g != generation) => Err(Stop::Closing),
        }
    }
}

/// True when `read`, made after a release of the lease whose id is `lease`, leaves that
/// release nothing to do: the record is still in flight under that lease (no release
/// happened), or settled (completed or failed: waiters answer from it).
fn contradicts(read: &Read, lease: u64) -> bool {
    match read {
        Read::Record(r, _) => {
            r.state != RecordState::InProgress
                || r.lease_token
                    .is_some_and(|t| Released::lease_id_of(t, r.fence) == lease)
        }
        Read::Pending | Read::Gone => false,
    }
}
