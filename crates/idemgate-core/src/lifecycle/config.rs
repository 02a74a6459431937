//! The lifecycle's settings: per process ([`LifecycleConfig`]) and per route ([`RoutePlan`]).
//! Their `Default` impls are the one place these defaults are written.

use std::time::Duration;

use crate::engine::LeaseExpiredPolicy;

/// Engine-wide settings (per process, not per route). Deserializes from a table of its
/// fields (durations as humantime strings, `"2s"`); a missing one keeps its default.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LifecycleConfig {
    /// Deadline of every store call; past it the call counts as failed
    /// ([`StoreError::Timeout`](crate::store::StoreError::Timeout)) and nothing is run late. Defaults to 2 s.
    #[serde(with = "humantime_serde")]
    pub store_timeout: Duration,
    /// Outcome writes not yet landed (store down or slow) past which new requests get
    /// [`Answer::Overloaded`](super::Answer::Overloaded) instead of running. Defaults to 1,024.
    pub max_pending_outcomes: usize,
    /// Bytes of responses held by outcome writes being retried past which new requests get
    /// [`Answer::Overloaded`](super::Answer::Overloaded). Defaults to 64 MiB.
    pub max_pending_outcome_bytes: usize,
    /// Duplicates waiting on in-flight keys ([`InFlightPolicy::Wait`]) past which a further
    /// one gets [`Answer::InFlight`](super::Answer::InFlight) at once. Defaults to 10,000.
    pub max_waiters: usize,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        Self {
            store_timeout: Duration::from_secs(2),
            max_pending_outcomes: 1024,
            max_pending_outcome_bytes: 64 << 20,
            max_waiters: 10_000,
        }
    }
}

/// The per-route settings of one attempt: the TTLs and the decision's knobs
/// ([`decide`](crate::engine::decide)). [`RoutePlan::default`] is the one place their
/// defaults are written:
///
/// ```
/// use std::time::Duration;
/// use idemgate_core::lifecycle::{InFlightPolicy, RoutePlan};
/// use idemgate_core::LeaseExpiredPolicy;
///
/// let plan = RoutePlan::default();
/// assert_eq!(plan.lease_ttl, Duration::from_secs(10));
/// assert_eq!(plan.record_ttl, Duration::from_secs(24 * 3600));
/// assert_eq!(plan.lease_expired, LeaseExpiredPolicy::Unknown);
/// assert!(!plan.retry_failed);
/// assert_eq!(plan.max_lease, Duration::from_secs(60));
/// assert_eq!(plan.on_in_flight, InFlightPolicy::Conflict);
/// assert_eq!(plan.max_wait, Duration::from_secs(10));
/// ```
///
/// It deserializes from a table of its fields, durations as humantime strings (`"10s"`),
/// a missing one keeping its default.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoutePlan {
    /// How long a dead holder blocks retries; renewed every third of it. Defaults to 10 s.
    #[serde(with = "humantime_serde")]
    pub lease_ttl: Duration,
    /// How long the record lives. Defaults to 24 h.
    #[serde(with = "humantime_serde")]
    pub record_ttl: Duration,
    /// What an expired lease means. Defaults to [`LeaseExpiredPolicy::Unknown`].
    pub lease_expired: LeaseExpiredPolicy,
    /// Whether a retry of a `failed` record (same fingerprint) may run again. Defaults to false.
    pub retry_failed: bool,
    /// How long a record whose lease is missing counts as in progress after `created_at`.
    /// Defaults to 60 s.
    #[serde(with = "humantime_serde")]
    pub max_lease: Duration,
    /// What a duplicate that finds its key in flight gets. Defaults to
    /// [`InFlightPolicy::Conflict`].
    pub on_in_flight: InFlightPolicy,
    /// How long a duplicate waits under [`InFlightPolicy::Wait`] before it gets
    /// [`Answer::InFlight`](super::Answer::InFlight). Defaults to 10 s.
    #[serde(with = "humantime_serde")]
    pub max_wait: Duration,
}

impl RoutePlan {
    /// True when duplicates of an in-flight key wait for its outcome.
    pub fn waits(&self) -> bool {
        self.on_in_flight == InFlightPolicy::Wait && !self.max_wait.is_zero()
    }
}

/// What a duplicate that finds its key in flight (the first request still runs under a live
/// lease) gets. Spelled `"conflict"` or `"wait"` in configuration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InFlightPolicy {
    /// [`Answer::InFlight`](super::Answer::InFlight) at once (`409 request-in-flight` with
    /// `Retry-After`): the client asks again. The default.
    #[default]
    Conflict,
    /// Wait up to [`RoutePlan::max_wait`] for the outcome, then answer as a retry after it
    /// would: the stored response (a replay), `previous-attempt-failed`, `outcome-unknown`,
    /// not kept. A released key is acquired by one waiter through the same atomic insert as
    /// a new key ([`Lifecycle::begin_waiting`](super::Lifecycle::begin_waiting)).
    Wait,
}

impl Default for RoutePlan {
    fn default() -> Self {
        Self {
            lease_ttl: Duration::from_secs(10),
            record_ttl: Duration::from_secs(24 * 3600),
            lease_expired: LeaseExpiredPolicy::Unknown,
            retry_failed: false,
            max_lease: Duration::from_secs(60),
            on_in_flight: InFlightPolicy::Conflict,
            max_wait: Duration::from_secs(10),
        }
    }
}
