//! idemgate's engine, without I/O.
//!
//! idemgate makes retried `POST`/`PATCH` requests safe: the first request with an
//! `Idempotency-Key` runs once, its response is stored, and every retry gets that response
//! back without running the operation again. This crate holds what every front door and
//! every store shares: key syntax, request fingerprints, records, the pure decision function
//! and the store trait, with an in-memory store and the store conformance suite.
//!
//! # Layout
//! - [`key`]: the `Idempotency-Key` header (RFC 8941 sf-string or bare token).
//! - [`fingerprint`] and [`canonical`]: what makes two requests the same (RFC 8785 JSON).
//! - [`record`]: records, states, stored responses, leases.
//! - [`engine`]: the decision function.
//! - [`store`]: the [`IdempotencyStore`] trait; [`memory`]: [`MemoryStore`].
//!
//! # State machine
//! ```text
//!             acquire (first)                 complete(fence, response)
//!   (none) ───────────────────▶ in_progress ────────────────────────────▶ completed ──▶ (purged at expires_at)
//!                                  │  │  fail(fence)
//!                                  │  └──────────────────────────────────▶ failed ─────▶ (purged at expires_at)
//!                                  │ release(fence): nothing happened, retry allowed
//!                                  └──────────────────────────────────────▶ (none)
//!           lease expired + same fingerprint: takeover → in_progress with fence+1
//! ```

pub mod canonical;
pub mod engine;
pub mod fingerprint;
pub mod key;
#[cfg(feature = "memory")]
pub mod memory;
pub mod record;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;

pub use engine::{decide, Decision, DecisionPolicy, LeaseExpiredPolicy};
pub use fingerprint::Fingerprint;
pub use key::{IdempotencyKey, KeyError};
#[cfg(feature = "memory")]
pub use memory::MemoryStore;
pub use record::{
    now_millis, IdempotencyRecord, Lease, LeaseToken, RecordState, ScopedKey, StoredResponse,
    UnixMillis,
};
pub use store::{AcquireOutcome, AcquireRequest, BoxError, IdempotencyStore, StoreError};
