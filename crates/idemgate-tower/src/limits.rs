//! Per-principal limits: one caller cannot slow everyone.
//!
//! Every new key costs a store insert and a forwarded call, so a caller that sends a burst
//! of new keys takes store and upstream capacity from every other caller. A route can cap,
//! per principal (the caller a record belongs to, see [`crate::PrincipalSource`]):
//!
//! - **in flight**: keyed requests of one principal on the route running at once
//!   ([`PrincipalLimits::max_in_flight`]). A request counts from admission (before its body
//!   is read) until its covered work ends: the detached task that forwards the call and
//!   writes its outcome, not the client's connection, so a client that disconnects cannot
//!   exceed its limit;
//! - **new keys**: a token bucket of new keys per second with a burst
//!   ([`PrincipalLimits::new_keys`]). Every keyed request takes a token before the store is
//!   touched; the token is given back when the store answered from an existing record
//!   (a replay, `409`, `422`, `410`, or `500` for a failed, unknown or corrupt record). So
//!   what a token pays for is a new execution (an insert and a forwarded call, or a
//!   takeover), and also a store that failed to answer (`503`) and a request refused before
//!   the store (`413`, `400` unreadable body). A replay does not use up the rate, but while
//!   the bucket is empty every keyed request of that principal gets `429`, replays
//!   included: the store is not asked, which is what keeps a flood away from it.
//!
//! Over a limit the answer is `429` problem+json (`#principal-limited`) with `Retry-After`,
//! and nothing is stored or forwarded. Requests without a key are not counted; on a route
//! with `allow_anonymous`, callers without a principal share one.
//!
//! Both limits are off by default; with both off, admission takes no lock and allocates
//! nothing. The state is per layer, so per process: with N gateways the effective limit is
//! N times the configured one. It is bounded: an idle principal (nothing in flight, bucket
//! full) is forgotten, and the table holds at most [`MAX_TRACKED`] (principal, route)
//! pairs; a principal that finds it full of busy ones is admitted unlimited and counted
//! under `idempotency_limit_table_full_total`.
//!
//! # Examples
//! ```
//! use std::num::NonZeroU32;
//! use idemgate_tower::limits::{KeyRate, PrincipalLimits};
//! use idemgate_tower::RoutePolicy;
//!
//! let route = RoutePolicy::default().with_limits(PrincipalLimits {
//!     max_in_flight: NonZeroU32::new(16),
//!     new_keys: Some(KeyRate::new(50.0, 100).unwrap()),
//! });
//! assert!(!route.limits.is_off());
//! ```

use std::num::NonZeroU32;

/// Most (principal, route) pairs one layer tracks at once.
pub const MAX_TRACKED: usize = 65_536;

/// The per-principal limits of one route. Both are off by default.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PrincipalLimits {
    /// Keyed requests of one principal on this route in flight at once. `None` (default):
    /// no limit.
    pub max_in_flight: Option<NonZeroU32>,
    /// New keys of one principal on this route: a token bucket. `None` (default): no limit.
    pub new_keys: Option<KeyRate>,
}

impl PrincipalLimits {
    /// True when neither limit is set: admission does nothing.
    pub fn is_off(&self) -> bool {
        self.max_in_flight.is_none() && self.new_keys.is_none()
    }
}

/// A token bucket: `per_second` tokens a second, holding at most `burst`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeyRate {
    per_second: f64,
    burst: NonZeroU32,
}

impl KeyRate {
    /// A bucket refilled at `per_second` tokens a second (fractions allowed: `0.5` is one
    /// every 2 s) holding `burst` tokens; a `burst` of 0 holds one second's worth (at least
    /// one token).
    ///
    /// # Errors
    /// A message when `per_second` is not a number from 0.001 up, or `burst` is above
    /// 1,000,000.
    pub fn new(per_second: f64, burst: u32) -> Result<Self, String> {
        if !per_second.is_finite() || per_second < 0.001 {
            return Err(format!(
                "{per_second} is not a rate of at least 0.001 per second"
            ));
        }
        if burst > 1_000_000 {
            return Err(format!("a burst of {burst} is above 1000000"));
        }
        let burst = match burst {
            0 => per_second.ceil().min(1e6) as u32,
            b => b,
        };
        Ok(Self {
            per_second,
            burst: NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN),
        })
    }

    /// Tokens added per second.
    pub fn per_second(&self) -> f64 {
        self.per_second
    }

    /// Tokens the bucket holds when full.
    pub fn burst(&self) -> NonZeroU32 {
        self.burst
    }
}

mod table;

pub(crate) use table::{Limiter, Ticket};
