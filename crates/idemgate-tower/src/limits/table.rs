//! The limits' state of one layer: in-flight counts and token buckets per (principal, route)
//! pair. Without the `limits` feature no limit is enforced: every request is admitted, and a
//! route that sets [`PrincipalLimits`](super::PrincipalLimits) is warned about once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use idemgate_core::lifecycle::Answer;
use tokio::time::Instant;

use super::{KeyRate, PrincipalLimits, MAX_TRACKED};
use crate::rejection::{IdempotencyRejection, LimitKind};

/// How often idle entries are swept out, and how soon a full table is swept again.
const SWEEP_EVERY: Duration = Duration::from_secs(10);
const FULL_SWEEP_GAP: Duration = Duration::from_secs(1);

impl KeyRate {
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
    #[cfg(all(test, feature = "limits"))]
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
        if !cfg!(feature = "limits") {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                tracing::warn!("per-principal limits are configured but idemgate-tower was built without its `limits` feature: they are not enforced");
            });
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
                crate::metrics::limit_table_full();
                return Ok(Ticket { held: None });
            }
            None => table.entries.entry(key.clone()).or_insert(Entry {
                in_flight: 0,
                tat: now,
            }),
        };
        let verdict = take(entry, limits, now);
        drop(table);
        if let Err(limited) = verdict {
            let limit = match limited {
                Limited::InFlight => "in_flight",
                Limited::NewKeys { .. } => "new_keys",
            };
            crate::metrics::limited(route, limit);
        }
        let limiter = self.clone();
        let held = Some(Held {
            limiter,
            key,
            token: verdict?,
            waiting: false,
        });
        Ok(Ticket { held })
    }

    /// Gives one token back to `key`'s bucket.
    fn refund(&self, key: &str, interval: Duration) {
        if let Some(e) = self.lock().entries.get_mut(key) {
            e.tat = e.tat.checked_sub(interval).unwrap_or(e.tat);
        }
    }

    /// Takes an in-flight slot of `key` again (a waiter about to run a released key), over
    /// the limit if need be: the request was admitted once.
    fn hold(&self, key: &Arc<str>) {
        let now = Instant::now();
        let mut table = self.lock();
        let entry = table.entries.entry(key.clone()).or_insert(Entry {
            in_flight: 0,
            tat: now,
        });
        entry.in_flight += 1;
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
    /// The request waits on another's key ([`Ticket::waiting`]): its slot is given back.
    waiting: bool,
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

impl Ticket {
    /// `true`: the request now waits for another request with its key (it runs nothing, so
    /// it gives its in-flight slot back); `false`: it is about to run a released key, and
    /// takes a slot again.
    pub(crate) fn waiting(&mut self, waiting: bool) {
        let Some(held) = &mut self.held else { return };
        if std::mem::replace(&mut held.waiting, waiting) == waiting {
            return;
        }
        match waiting {
            true => held.limiter.release(&held.key),
            false => held.limiter.hold(&held.key),
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(held) = self.held.as_ref().filter(|h| !h.waiting) {
            held.limiter.release(&held.key);
        }
    }
}

#[cfg(all(test, feature = "limits"))]
#[path = "tests.rs"]
mod tests;
