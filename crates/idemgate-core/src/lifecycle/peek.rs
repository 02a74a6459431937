//! [`Lifecycle::peek`]: the answer a live record gives, read ahead of the acquire on stores
//! that read first anyway, so a front door answers replays, conflicts and mismatches in
//! the caller's own task and starts the work that must outlive its client only for a key
//! it may acquire.

use std::future::Future;

use tokio::time::Instant;

use super::{hash_key, principal_hash, Answer, Begin, Lifecycle, RoutePlan};
use crate::engine::{decide, Decision};
use crate::fingerprint::Fingerprint;
use crate::integrity::check_opened;
use crate::record::{IdempotencyRecord, LeaseToken, ScopedKey};
use crate::seal::{Keyring, KEYED_FINGERPRINT};
use crate::store::{IdempotencyStore, Peeked, StoreError};

/// What [`Lifecycle::peek`] found. On a route whose duplicates wait
/// ([`RoutePlan::waits`]), a key in flight is an [`Peek::Acquire`]: the wait, like the
/// acquire, runs in the work that outlives the client ([`Lifecycle::begin_waiting`]).
#[derive(Debug)]
pub enum Peek {
    /// The key's live record answers the request: nothing was acquired, nothing runs.
    Answer(Answer),
    /// The key may be acquired: pass this to [`Lifecycle::begin_after`], in the work that
    /// outlives the client.
    Acquire(Acquire),
}

/// An acquire to run after [`Lifecycle::peek`], with what the peek learnt (opaque).
#[derive(Debug)]
pub struct Acquire(Ahead);

#[derive(Debug)]
enum Ahead {
    /// Nothing read (the store does not read ahead, or the record needs the acquire's
    /// own decision: expired, or one to take over).
    NotRead,
    /// No live record: the acquire skips the store's own read ahead.
    Absent,
    /// The read failed: the acquire answers with this error without calling the store
    /// again (one deadline per request, not two).
    Failed(StoreError),
    /// The key is in flight on a route whose duplicates wait: the acquire answers
    /// [`Answer::InFlight`] without a store call, and [`Lifecycle::begin_waiting`] waits.
    InFlight(u64),
}

/// `record` with its stored response opened ([`Keyring::open`]) and checked in clear
/// ([`check_opened`]), when `decision` answers with it (a replay, or a record not
/// replayable); other decisions never look at the response.
///
/// # Errors
/// [`StoreError::Corrupt`]: the response is sealed with a key not configured (or none is),
/// does not open, or breaks a rule in clear. It is never replayed.
pub(super) fn opened(
    keyring: Option<&Keyring>,
    mut record: IdempotencyRecord,
    decision: Decision,
) -> Result<IdempotencyRecord, StoreError> {
    if !matches!(decision, Decision::Replay | Decision::NotReplayable) {
        return Ok(record);
    }
    let Some(response) = record.response.take() else {
        return Ok(record);
    };
    let corrupt = |detail: String| StoreError::Corrupt { detail };
    let clear = match (response.sealed_by, keyring) {
        (None, _) => response,
        (Some(id), None) => {
            return Err(corrupt(format!(
                "sealed with key id {id}, and no encryption keys are configured"
            )))
        }
        (Some(_), Some(ring)) => ring
            .open(&record.key, record.fence, response)
            .map_err(|e| corrupt(e.to_string()))?,
    };
    check_opened(&clear).map_err(|e| corrupt(format!("opened response: {e}")))?;
    record.response = Some(clear);
    Ok(record)
}

/// The answer `decision` about the live `record` gives without acquiring it, or `None`
/// when the key is to be acquired (inserted again or taken over).
pub(super) fn settled(
    key: &ScopedKey,
    record: IdempotencyRecord,
    decision: Decision,
) -> Option<Answer> {
    Some(match decision {
        Decision::Insert | Decision::Takeover => return None,
        Decision::Replay => match record.response {
            Some(r) => Answer::Replay(r),
            None => Answer::Corrupt, // validation guarantees a response; be safe
        },
        Decision::NotReplayable => Answer::NotReplayable {
            status: record.response.as_ref().map_or(0, |r| r.status),
            detail: record
                .response
                .as_ref()
                .and_then(|r| crate::admin::resolved_detail(&r.headers)),
        },
        Decision::InFlight { retry_after_ms } => Answer::InFlight { retry_after_ms },
        Decision::Mismatch => Answer::Mismatch,
        Decision::PreviousFailed => Answer::PreviousFailed,
        Decision::OutcomeUnknown => {
            tracing::warn!(route = %key.route, key = %hash_key(key), principal = %principal_hash(key), fence = record.fence, "lease lapsed before the outcome was written: outcome unknown");
            metrics::counter!("idempotency_outcome_unknown_total").increment(1);
            Answer::OutcomeUnknown
        }
    })
}

/// The request's fingerprint in the algorithm version `record` was written with: `fingerprint`
/// itself when the versions agree, else `refingerprint`'s (`fingerprint` when that version is
/// unknown, which [`decide`] then reads as a mismatch, never a replay).
pub(super) async fn fingerprint_as<F>(
    record: &IdempotencyRecord,
    fingerprint: Fingerprint,
    (refingerprint, keyring): (&impl Fn(u16) -> F, Option<&Keyring>),
) -> Fingerprint
where
    F: Future<Output = Option<Fingerprint>>,
{
    let stored = &record.fingerprint;
    let base = stored.version & !KEYED_FINGERPRINT;
    let plain = match base {
        v if v == fingerprint.version => fingerprint,
        v => match refingerprint(v).await {
            Some(fp) => fp,
            None => return fingerprint, // another version: a mismatch
        },
    };
    if stored.version & KEYED_FINGERPRINT == 0 {
        return plain;
    }
    // Keyed under one of the keys; else, when the record's response is sealed with a key
    // this process lacks (removed too early, or none configured), the record answers
    // `Corrupt` ([`opened`]) rather than a mismatch; else a mismatch.
    let matched = keyring.and_then(|ring| ring.matching_fingerprint(plain, stored));
    let sealed_by = record.response.as_ref().and_then(|r| r.sealed_by);
    let key_gone =
        sealed_by.is_some_and(|id| keyring.is_none_or(|ring| !ring.ids().any(|k| k == id)));
    matched
        .or_else(|| key_gone.then_some(*stored))
        .unwrap_or(fingerprint)
}

impl<St: IdempotencyStore> Lifecycle<St> {
    /// Reads `key`'s live record ahead of the acquire ([`IdempotencyStore::peek`], under the
    /// store deadline) and answers from it when it settles the request (a replay, `409`,
    /// mismatch, failed, outcome unknown, not kept, corrupt); otherwise says to acquire with
    /// [`Lifecycle::begin_after`]. It writes nothing, so the caller may drop it (a client
    /// that left) at no cost; [`Lifecycle::begin_after`] is what must run to its end.
    ///
    /// `refingerprint` is as for [`Lifecycle::begin`]. On a store that does not read ahead
    /// it reads nothing and always says to acquire.
    pub async fn peek<F>(
        &self,
        key: &ScopedKey,
        fingerprint: Fingerprint,
        plan: &RoutePlan,
        refingerprint: impl Fn(u16) -> F,
    ) -> Peek
    where
        F: Future<Output = Option<Fingerprint>>,
    {
        // Overloaded: the acquire answers it, as it would without a peek.
        if self.overloaded() {
            return Peek::Acquire(Acquire(Ahead::NotRead));
        }
        let started = Instant::now();
        let read = tokio::time::timeout(self.config.store_timeout, self.store.peek(key)).await;
        let read = read.unwrap_or(Err(StoreError::Timeout));
        if !matches!(read, Ok(Peeked::NotRead)) {
            self.observe("peek", started);
        }
        let (record, now) = match read {
            Ok(Peeked::Live { record, now }) => (record, now),
            Ok(Peeked::Absent) => return Peek::Acquire(Acquire(Ahead::Absent)),
            Ok(Peeked::NotRead) => return Peek::Acquire(Acquire(Ahead::NotRead)),
            Err(e @ StoreError::Corrupt { .. }) => return Peek::Answer(self.store_failed(key, e)),
            Err(e) => return Peek::Acquire(Acquire(Ahead::Failed(e))),
        };
        let fp = fingerprint_as(&record, fingerprint, (&refingerprint, self.keyring())).await;
        let decision = decide(Some(&record), &fp, now, plan);
        let record = match opened(self.keyring(), record, decision) {
            Ok(record) => record,
            Err(e) => return Peek::Answer(self.store_failed(key, e)),
        };
        match settled(key, record, decision) {
            Some(Answer::InFlight { retry_after_ms }) if plan.waits() => {
                Peek::Acquire(Acquire(Ahead::InFlight(retry_after_ms)))
            }
            Some(answer) => Peek::Answer(answer),
            None => Peek::Acquire(Acquire(Ahead::NotRead)),
        }
    }

    /// [`Lifecycle::begin`] after [`Lifecycle::peek`] said to acquire: the same answers,
    /// without reading again what the peek read.
    pub async fn begin_after<F>(
        &self,
        acquire: Acquire,
        key: &ScopedKey,
        fingerprint: Fingerprint,
        plan: &RoutePlan,
        refingerprint: impl Fn(u16) -> F,
    ) -> Begin
    where
        F: Future<Output = Option<Fingerprint>>,
    {
        let unseen = match acquire.0 {
            Ahead::Failed(e) => return Begin::Answer(self.store_failed(key, e)),
            Ahead::InFlight(retry_after_ms) => {
                return Begin::Answer(Answer::InFlight { retry_after_ms })
            }
            Ahead::Absent => true,
            Ahead::NotRead => false,
        };
        let token = LeaseToken::random();
        self.begin_as(key, fingerprint, plan, (token, true, unseen), refingerprint)
            .await
    }
}
