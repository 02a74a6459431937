//! The seeded random source: SplitMix64, shared by every part of one run. Each run is on
//! one thread in a fixed order of events, so the same seed draws the same numbers.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// A seeded generator, cheap to clone (clones share the stream).
#[derive(Clone, Debug)]
pub struct Rng(Arc<Mutex<u64>>);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Self(Arc::new(Mutex::new(seed ^ 0x5eed_1de0_9a7e_0001)))
    }

    /// The next 64 random bits.
    pub fn next_u64(&self) -> u64 {
        let mut s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// True with probability `percent` / 100.
    pub fn chance(&self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A number in `lo..=hi`.
    pub fn range(&self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// A duration between `lo_ms` and `hi_ms` milliseconds.
    pub fn millis(&self, lo_ms: u64, hi_ms: u64) -> Duration {
        Duration::from_millis(self.range(lo_ms, hi_ms))
    }
}
