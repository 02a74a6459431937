//! The request lifecycle, the same for every front door (HTTP layer, gateway, key service,
//! library users without HTTP): **begin** (admit, acquire, decide, reconcile races),
//! **hold** (run the operation while the lease is renewed), **finish** (write the outcome,
//! retrying until it lands).
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::sync::Arc;
//! use idemgate_core::lifecycle::{Answer, Begin, Lifecycle, Outcome, RoutePlan};
//! use idemgate_core::testing::{fp, response, unique_key};
//! use idemgate_core::MemoryStore;
//!
//! let engine = Lifecycle::new(Arc::new(MemoryStore::new()), Default::default());
//! let plan = RoutePlan::default();
//! let key = unique_key("alice");
//! let Begin::Run(holder) = engine.begin(&key, fp(1), &plan, |_| async { None }).await else { panic!() };
//! let status = engine.hold(&holder, async { 201 }).await; // the operation, run once
//! engine.finish(&holder, Outcome::Complete(response(2))).await;
//! match engine.begin(&key, fp(1), &plan, |_| async { None }).await {
//!     Begin::Answer(Answer::Replay(r)) => assert_eq!(r.status, status),
//!     other => panic!("{other:?}"),
//! }
//! # });
//! ```
//!
//! # What the answers mean
//! See [`Answer`]; every one that is not [`Begin::Run`] means the operation was not run by
//! this call. A store that does not answer within [`LifecycleConfig::store_timeout`] gives
//! [`Answer::Unavailable`], never a late run.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::{decide, Decision};
use crate::fingerprint::Fingerprint;
use crate::record::{IdempotencyRecord, Lease, LeaseToken, ScopedKey, StoredResponse};
use crate::seal::Keyring;
use crate::store::{IdempotencyStore, InsertOutcome, InsertRequest, StoreError};

mod config;
mod outcome;
mod peek;
mod pending;
pub mod planted;
mod reclaim;
#[cfg(test)]
mod tests;
mod wait;

pub use config::{InFlightPolicy, LifecycleConfig, RoutePlan};
pub use outcome::{Finished, Outcome, PendingOutcome};
use peek::fingerprint_as;
pub use peek::{Acquire, Peek};
use pending::Pending;
pub(crate) use wait::Waiters;

/// How many insert/decide/take-over rounds [`Lifecycle::begin`] tries while the record keeps
/// changing under it (released, expired or taken over by someone else) before it answers
/// [`Answer::InFlight`].
const MAX_ROUNDS: usize = 8;

/// The result of [`Lifecycle::begin`].
#[derive(Debug)]
pub enum Begin {
    /// This call owns the record: run the operation under [`Lifecycle::hold`], then
    /// [`Lifecycle::finish`].
    Run(Holder),
    /// The operation is not run; answer with this.
    Answer(Answer),
}

/// Why a request is answered without running the operation.
#[derive(Debug)]
pub enum Answer {
    /// The operation completed before: its stored response (validated, checksum verified).
    Replay(StoredResponse),
    /// The operation completed but its response was not kept (streamed or too large), or an
    /// operator recorded it as not replayable (`idemgate resolve --not-replayable`).
    NotReplayable {
        /// The status the first caller got.
        status: u16,
        /// The operator's text, for a record resolved as not replayable
        /// ([`crate::admin::resolved_detail`]); `None` otherwise.
        detail: Option<String>,
    },
    /// The first request still runs (its lease is live, or the record kept changing).
    InFlight {
        /// Suggested wait, in ms (at most 1,000).
        retry_after_ms: u64,
    },
    /// The key was used with another request (different fingerprint).
    Mismatch,
    /// The first attempt failed after it may have run.
    PreviousFailed,
    /// The first attempt's lease lapsed before its outcome was written: it may have run.
    /// The record is kept; if the holder still records the outcome, retries replay it.
    OutcomeUnknown,
    /// The stored record fails validation or its checksum; it is never replayed.
    Corrupt,
    /// The store failed or did not answer in time; nothing was run.
    Unavailable(StoreError),
    /// While this duplicate waited ([`InFlightPolicy::Wait`]), the first request's holder
    /// released the key (nothing ran) and this waiter's one try to run it again is spent, or
    /// would come after the released answer's `Retry-After` past the wait: the status the
    /// holder's client got. Not stored, not a replay.
    Released {
        /// The holder's client's status (`503` when nothing was forwarded).
        status: u16,
        /// Its `Retry-After`, in ms, if it had one.
        retry_after_ms: Option<u64>,
    },
    /// Too many outcome writes are pending, or follow-ups of inserts whose answer was lost
    /// queued (store slow or down); nothing was run.
    Overloaded,
}

/// Ownership of a record, from [`Begin::Run`] until [`Lifecycle::finish`].
#[derive(Debug)]
pub struct Holder {
    /// The lease: proof of ownership.
    pub lease: Lease,
    /// True when an expired lease (or a failed record) was taken over: the operation may
    /// have run before, so front doors tell the operation (`Idempotent-Takeover: true`).
    pub takeover: bool,
    /// The route's duplicates wait on the key: its outcome is announced to other processes.
    announce: bool,
    lease_ttl: Duration,
    /// After this the record has expired and an outcome write is pointless.
    record_deadline: Instant,
}

/// The lifecycle over a store. Cheap to clone (one `Arc` each for the store and the
/// pending-outcome counters).
#[derive(Debug)]
pub struct Lifecycle<St> {
    store: Arc<St>,
    config: LifecycleConfig,
    pending: Arc<Pending>,
    /// Follow-ups of inserts whose answer was lost ([`reclaim`]), running and queued.
    reclaims: Arc<reclaim::Reclaims>,
    /// Duplicates waiting on in-flight keys ([`wait`]).
    waiters: Arc<Waiters>,
    /// The encryption keys that seal outcomes and open records ([`crate::seal`]); `None`
    /// stores responses in clear (and reads a sealed record as corrupt).
    keyring: Option<Arc<Keyring>>,
}

impl<St> Clone for Lifecycle<St> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            config: self.config.clone(),
            pending: self.pending.clone(),
            reclaims: self.reclaims.clone(),
            waiters: self.waiters.clone(),
            keyring: self.keyring.clone(),
        }
    }
}

impl<St> Lifecycle<St> {
    /// The store.
    pub fn store(&self) -> &Arc<St> {
        &self.store
    }

    /// The engine-wide settings.
    pub fn config(&self) -> &LifecycleConfig {
        &self.config
    }

    /// The encryption keys, when responses are sealed at rest ([`Lifecycle::with_keyring`]).
    pub fn keyring(&self) -> Option<&Keyring> {
        self.keyring.as_deref()
    }

    /// `response` as a write under `lease` stores it: sealed for the lease's record when
    /// responses are sealed at rest ([`Keyring::seal`]), else as it is. For front doors that
    /// write an outcome themselves (the key service's `/v1/complete`, a completion inside a
    /// handler's transaction).
    pub fn seal_response(&self, lease: &Lease, response: StoredResponse) -> StoredResponse {
        match self.keyring() {
            Some(ring) => ring.seal(&lease.key, lease.fence, &response),
            None => response,
        }
    }

    /// The response of a record read from the store, opened and checked in clear
    /// ([`Keyring::open`], [`crate::integrity::check_opened`]).
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] as for a replay: sealed with a key not configured, or it does
    /// not open.
    pub fn open_response(
        &self,
        record: IdempotencyRecord,
    ) -> Result<Option<StoredResponse>, StoreError> {
        let decision = crate::engine::Decision::Replay;
        Ok(peek::opened(self.keyring(), record, decision)?.response)
    }

    /// Whether `stored` (a record's fingerprint) is the fingerprint of a request whose plain
    /// fingerprint is `plain`: equal, or keyed from it under one of the keys
    /// ([`Keyring::matching_fingerprint`]).
    pub fn same_fingerprint(&self, stored: &Fingerprint, plain: Fingerprint) -> bool {
        *stored == plain
            || self
                .keyring()
                .is_some_and(|ring| ring.matching_fingerprint(plain, stored).is_some())
    }

    /// [`Lifecycle::keyring`], shared.
    pub fn shared_keyring(&self) -> Option<Arc<Keyring>> {
        self.keyring.clone()
    }

    /// Outcome writes being retried, and the response bytes they hold.
    pub fn pending_outcomes(&self) -> (usize, usize) {
        self.pending.load()
    }
}

impl<St: IdempotencyStore> Lifecycle<St> {
    /// A lifecycle over `store`.
    pub fn new(store: Arc<St>, config: LifecycleConfig) -> Self {
        Self {
            store,
            config,
            pending: Arc::default(),
            reclaims: Arc::default(),
            waiters: Arc::default(),
            keyring: None,
        }
    }

    /// Seals every stored response with `keyring`'s first key and opens records with any of
    /// its keys ([`crate::seal`]: encryption at rest). Without it responses are stored in
    /// clear, and a sealed record reads as corrupt (never replayed).
    pub fn with_keyring(mut self, keyring: Option<Arc<Keyring>>) -> Self {
        self.keyring = keyring;
        self
    }

    /// Acquires `key` for a request with `fingerprint`, or says how to answer it.
    ///
    /// `refingerprint(version)` computes the request's fingerprint with another algorithm
    /// version, for a record written by a release that fingerprinted differently (`None`
    /// if unknown: the request then counts as a mismatch, never a replay). It is a future,
    /// so a caller can compute a large body's fingerprint off the async worker threads.
    pub async fn begin<F>(
        &self,
        key: &ScopedKey,
        fingerprint: Fingerprint,
        plan: &RoutePlan,
        refingerprint: impl Fn(u16) -> F,
    ) -> Begin
    where
        F: std::future::Future<Output = Option<Fingerprint>>,
    {
        let token = LeaseToken::random();
        self.begin_as(key, fingerprint, plan, (token, true, false), refingerprint)
            .await
    }

    /// [`Lifecycle::begin`] with the token a new lease (inserted or taken over) carries, for
    /// front doors whose caller names its attempt: a retried acquire of the same attempt
    /// derives the same token, so it can recognise its own lease in a record it finds
    /// `in_progress`. The token must be unguessable to anyone but that attempt's caller.
    ///
    /// Unlike [`Lifecycle::begin`], an insert whose answer was lost is **not** released:
    /// a retry of the same attempt may already hold that very lease again, and releasing it
    /// would let another attempt run. If the caller never retries, the record lapses with
    /// its lease.
    pub async fn begin_with_token<F>(
        &self,
        key: &ScopedKey,
        fingerprint: Fingerprint,
        plan: &RoutePlan,
        token: LeaseToken,
        refingerprint: impl Fn(u16) -> F,
    ) -> Begin
    where
        F: std::future::Future<Output = Option<Fingerprint>>,
    {
        self.begin_as(key, fingerprint, plan, (token, false, false), refingerprint)
            .await
    }

    /// `begin` with `token`; `reclaim`: release an insert whose answer was lost; `unseen`:
    /// a peek just found no live record (the first insert skips the store's read ahead).
    async fn begin_as<F>(
        &self,
        key: &ScopedKey,
        fingerprint: Fingerprint,
        plan: &RoutePlan,
        (token, reclaim, mut unseen): (LeaseToken, bool, bool),
        refingerprint: impl Fn(u16) -> F,
    ) -> Begin
    where
        F: std::future::Future<Output = Option<Fingerprint>>,
    {
        if self.overloaded() {
            return Begin::Answer(Answer::Overloaded);
        }
        // With keys, the stored fingerprint is keyed (docs/security.md); the comparison
        // below keys the request's the same way ([`peek::fingerprint_as`]).
        let stored = match self.keyring() {
            Some(ring) => ring.keyed_fingerprint(fingerprint),
            None => fingerprint,
        };
        let mut req = InsertRequest {
            key: key.clone(),
            fingerprint: stored,
            token,
            lease_ttl: plan.lease_ttl,
            record_ttl: plan.record_ttl,
        };
        for _ in 0..MAX_ROUNDS {
            let inserted = self.insert(req, reclaim, std::mem::take(&mut unseen)).await;
            let (record, now) = match inserted {
                Ok((_, InsertOutcome::Inserted(lease))) => {
                    return Begin::Run(self.holder(lease, false, plan.record_ttl, plan))
                }
                Ok((back, InsertOutcome::Existing { record, now })) => {
                    req = back;
                    (record, now)
                }
                Err(e) => return Begin::Answer(self.store_failed(key, e)),
            };
            let fp = fingerprint_as(&record, fingerprint, (&refingerprint, self.keyring())).await;
            let answer = match decide(Some(&record), &fp, now, plan) {
                Decision::Insert => continue, // expired between the read and the decision
                Decision::Takeover => match self.take_over(&record, now, plan, token).await {
                    Ok(Some(holder)) => return Begin::Run(holder),
                    Ok(None) => continue, // changed since the read
                    Err(e) => self.store_failed(key, e),
                },
                decision => match peek::opened(self.keyring(), record, decision) {
                    Err(e) => self.store_failed(key, e),
                    Ok(record) => match peek::settled(key, record, decision) {
                        Some(answer) => answer,
                        None => continue,
                    },
                },
            };
            return Begin::Answer(answer);
        }
        Begin::Answer(Answer::InFlight {
            retry_after_ms: 1000,
        })
    }

    /// One insert-or-get under the store deadline. When its answer is lost (a timeout: the
    /// call goes on in the background; or an error whose outcome is unknown,
    /// [`StoreError::outcome_unknown`]), a record it inserted is released with its own lease
    /// (when `reclaim`), so a request that was never forwarded never reads as
    /// `outcome-unknown`. A definite refusal inserted nothing: no follow-up.
    async fn insert(
        &self,
        req: InsertRequest,
        reclaim: bool,
        unseen: bool,
    ) -> Result<(InsertRequest, InsertOutcome), StoreError> {
        let (key, token, ttl) = (req.key.clone(), req.token, req.record_ttl);
        let store = self.store.clone();
        let mut call = Box::pin(async move {
            let r = match unseen {
                true => store.insert_or_get_unseen(&req).await,
                false => store.insert_or_get(&req).await,
            };
            r.map(|found| (req, found))
        });
        let started = Instant::now();
        let out = tokio::time::timeout(self.config.store_timeout, &mut call).await;
        self.observe("insert_or_get", started);
        match out {
            Ok(Err(e)) if !e.outcome_unknown() => Err(e),
            Ok(Err(e)) => {
                if reclaim {
                    self.reclaim(None::<std::future::Ready<_>>, &key, token, ttl);
                }
                Err(e)
            }
            Ok(done) => done,
            Err(_) => {
                if reclaim {
                    self.reclaim(Some(call), &key, token, ttl);
                }
                Err(StoreError::Timeout)
            }
        }
    }

    async fn take_over(
        &self,
        seen: &IdempotencyRecord,
        now: i64,
        plan: &RoutePlan,
        token: LeaseToken,
    ) -> Result<Option<Holder>, StoreError> {
        let lease = self
            .timed(
                "take_over",
                self.store.take_over(seen, token, plan.lease_ttl),
            )
            .await?;
        let left = u64::try_from(seen.expires_at.saturating_sub(now)).unwrap_or(0);
        let ttl = Duration::from_millis(left).max(plan.lease_ttl);
        Ok(lease.map(|lease| {
            tracing::warn!(route = %seen.key.route, key = %hash_key(&seen.key), principal = %principal_hash(&seen.key), fence = lease.fence, "took over an expired lease");
            metrics::counter!("idempotency_takeovers_total").increment(1);
            self.holder(lease, true, ttl, plan)
        }))
    }

    fn holder(&self, lease: Lease, takeover: bool, ttl: Duration, plan: &RoutePlan) -> Holder {
        Holder {
            lease,
            takeover,
            announce: plan.waits(),
            lease_ttl: plan.lease_ttl,
            record_deadline: Instant::now() + ttl,
        }
    }

    fn store_failed(&self, key: &ScopedKey, e: StoreError) -> Answer {
        match e {
            StoreError::Corrupt { detail } => {
                tracing::error!(route = %key.route, key = %hash_key(key), principal = %principal_hash(key), %detail, "stored record is corrupt; not replayed");
                metrics::counter!("idempotency_record_corrupt_total", "backend" => self.store.backend()).increment(1);
                Answer::Corrupt
            }
            e => {
                tracing::warn!(route = %key.route, error = %crate::report::error_text(&e), "store unavailable");
                Answer::Unavailable(e)
            }
        }
    }

    /// Runs one store call under the deadline and records its duration.
    async fn timed<T>(
        &self,
        op: &'static str,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let out = tokio::time::timeout(self.config.store_timeout, call).await;
        self.observe(op, started);
        out.unwrap_or(Err(StoreError::Timeout))
    }

    fn observe(&self, op: &'static str, started: Instant) {
        metrics::histogram!("idempotency_store_duration_seconds", "op" => op, "backend" => self.store.backend())
            .record(started.elapsed().as_secs_f64());
    }
}

/// The key for logs: its keyed hash ([`crate::loghash::key_hash`], 16 hex digits), never
/// the key itself, which a client may have made guessable.
pub fn hash_key(key: &ScopedKey) -> String {
    crate::loghash::key_hash(key.key.as_str())
}

/// The principal for logs: its keyed hash ([`crate::loghash::principal_hash`]).
pub fn principal_hash(key: &ScopedKey) -> String {
    crate::loghash::principal_hash(&key.principal)
}
