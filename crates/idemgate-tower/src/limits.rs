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
//! let route = RoutePolicy {
//!     limits: PrincipalLimits {
//!         max_in_flight: NonZeroU32::new(16),
//!         new_keys: Some(KeyRate::new(50.0, 100).unwrap()),
//!     },
//!     ..RoutePolicy::default()
//! };
//! assert!(!route.limits.is_off());
//! ```

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use idemgate_core::lifecycle::Answer;
use tokio::time::Instant;

use crate::rejection::{IdempotencyRejection, LimitKind};

/// Most (principal, route) pairs one layer tracks at once.
pub const MAX_TRACKED: usize = 65_536;

/// How often idle entries are swept out, and how soon a full table is swept again.
const SWEEP_EVERY: Duration = Duration::from_secs(10);
const FULL_SWEEP_GAP: Duration = Duration::from_secs(1);

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

    /// The time one token takes to come back.
    fn interval(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.per_second)
    }
}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Limited {
    InFlight,
    NewKeys { retry_after: Duration },
}

impl From<Limited> for IdempotencyRejection {
    fn from(l: Limited) -> Self {
        let (kind, retry_after_secs) = match l {
            Limited::InFlight => (LimitKind::InFlight, 1),
            Limited::NewKeys { retry_after } => {
                let ms = u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX);
                (LimitKind::NewKeys, ms.div_ceil(1000).max(1))
            }
        };
        IdempotencyRejection::PrincipalLimited {
            kind,
            retry_after_secs,
        }
    }
}

/// One (principal, route) pair's state.
#[derive(Debug)]
struct Entry {
    in_flight: u32,
    /// GCRA's theoretical arrival time: the bucket is full once `now >= tat`, and each
    /// token taken pushes it one interval later.
    tat: Instant,
}

impl Entry {
    fn idle(&self, now: Instant) -> bool {
        self.in_flight == 0 && self.tat <= now
    }
}

#[derive(Debug)]
struct Table {
    entries: HashMap<Arc<str>, Entry>,
    next_sweep_at: Instant,
    next_full_sweep_at: Instant,
}

/// The limits' state of one layer: an entry per busy (principal, route) pair.
#[derive(Debug)]
pub(crate) struct Limiter {
    table: Mutex<Table>,
    capacity: usize,
}

impl Default for Limiter {
    fn default() -> Self {
        Self::with_capacity(MAX_TRACKED)
    }
}

impl Limiter {
    /// A limiter that tracks at most `capacity` pairs.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        let now = Instant::now();
        Self {
            table: Mutex::new(Table {
                entries: HashMap::new(),
                next_sweep_at: now + SWEEP_EVERY,
                next_full_sweep_at: now,
            }),
            capacity,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // No code panics under this lock; a poisoned table is still consistent.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Pairs tracked now.
    #[cfg(test)]
    pub(crate) fn tracked(&self) -> usize {
        self.lock().entries.len()
    }

    /// Admits a keyed request of `principal` on `route` (its metric label) under `limits`,
    /// or says which limit it is over (counted under `idempotency_limited_total`). The
    /// ticket holds the request's in-flight slot and token until dropped.
    pub(crate) fn admit(
        self: &Arc<Self>,
        limits: &PrincipalLimits,
        route: &str,
        principal: &str,
    ) -> Result<Ticket, Limited> {
        if limits.is_off() {
            return Ok(Ticket { held: None });
        }
        let now = Instant::now();
        let key: Arc<str> = format!("{}:{route}{principal}", route.len()).into();
        let mut table = self.lock();
        table.sweep(now, self.capacity);
        let full = table.entries.len() >= self.capacity;
        let entry = match table.entries.get_mut(&key) {
            Some(entry) => entry,
            None if full => {
                metrics::counter!("idempotency_limit_table_full_total").increment(1);
                return Ok(Ticket { held: None });
            }
            None => table.entries.entry(key.clone()).or_insert(Entry {
                in_flight: 0,
                tat: now,
            }),
        };
        let verdict = take(entry, limits, now);
        drop(table);
        match verdict {
            Ok(token) => Ok(Ticket {
                held: Some(Held {
                    limiter: self.clone(),
                    key,
                    token,
                }),
            }),
            Err(limited) => {
                let limit = match limited {
                    Limited::InFlight => "in_flight",
                    Limited::NewKeys { .. } => "new_keys",
                };
                metrics::counter!("idempotency_limited_total", "route" => route.to_owned(), "limit" => limit)
                    .increment(1);
                Err(limited)
            }
        }
    }

    /// Gives one token back to `key`'s bucket.
    fn refund(&self, key: &str, interval: Duration) {
        if let Some(e) = self.lock().entries.get_mut(key) {
            e.tat = e.tat.checked_sub(interval).unwrap_or(e.tat);
        }
    }

    /// Ends one request of `key`; forgets the pair if it is idle.
    fn release(&self, key: &str) {
        let now = Instant::now();
        let mut table = self.lock();
        if let Some(e) = table.entries.get_mut(key) {
            e.in_flight = e.in_flight.saturating_sub(1);
            if e.idle(now) {
                table.entries.remove(key);
            }
        }
    }
}

/// Checks `entry` against `limits` at `now` and, if admitted, takes an in-flight slot and a
/// token (returning the token's interval, to refund it).
fn take(
    entry: &mut Entry,
    limits: &PrincipalLimits,
    now: Instant,
) -> Result<Option<Duration>, Limited> {
    if limits
        .max_in_flight
        .is_some_and(|max| entry.in_flight >= max.get())
    {
        return Err(Limited::InFlight);
    }
    let token = match limits.new_keys {
        None => None,
        Some(rate) => {
            // GCRA: admit while the theoretical arrival time is at most (burst - 1)
            // intervals ahead of now.
            let interval = rate.interval();
            let tolerance = interval.saturating_mul(rate.burst.get() - 1);
            let tat = entry.tat.max(now);
            let earliest = tat.checked_sub(tolerance).unwrap_or(now);
            if earliest > now {
                return Err(Limited::NewKeys {
                    retry_after: earliest - now,
                });
            }
            entry.tat = tat + interval;
            Some(interval)
        }
    };
    entry.in_flight += 1;
    Ok(token)
}

impl Table {
    /// Forgets idle pairs every [`SWEEP_EVERY`], or when the table is full (at most once
    /// every [`FULL_SWEEP_GAP`], so a full table of busy pairs is not scanned per request).
    fn sweep(&mut self, now: Instant, capacity: usize) {
        let full = self.entries.len() >= capacity;
        if now < self.next_sweep_at && !(full && now >= self.next_full_sweep_at) {
            return;
        }
        self.entries.retain(|_, e| !e.idle(now));
        self.next_sweep_at = now + SWEEP_EVERY;
        self.next_full_sweep_at = now + FULL_SWEEP_GAP;
    }
}

/// An admitted request's hold on its limits: its in-flight slot, released on drop (when the
/// covered work ends), and its token, kept unless [`Ticket::settle`] gives it back.
#[derive(Debug)]
pub(crate) struct Ticket {
    held: Option<Held>,
}

#[derive(Debug)]
struct Held {
    limiter: Arc<Limiter>,
    key: Arc<str>,
    /// The token's interval, while the token is taken.
    token: Option<Duration>,
}

impl Ticket {
    /// After the lifecycle answered without running anything: gives the token back when
    /// the store answered from an existing record (so replays and conflicts cost no rate),
    /// and keeps it when the store failed or was overloaded.
    pub(crate) fn settle(&mut self, answer: &Answer) {
        if matches!(answer, Answer::Unavailable(_) | Answer::Overloaded) {
            return;
        }
        if let Some(held) = &mut self.held {
            if let Some(interval) = held.token.take() {
                held.limiter.refund(&held.key, interval);
            }
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(held) = &self.held {
            held.limiter.release(&held.key);
        }
    }
}

#[cfg(test)]
mod tests;
