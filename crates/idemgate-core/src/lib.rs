//! idemgate's engine: everything but the network.
//!
//! idemgate makes retried `POST`/`PATCH` requests safe: the first request with an
//! `Idempotency-Key` runs once, its response is stored, and every retry gets that response
//! back without running the operation again. This crate holds what every front door and
//! every store shares: key syntax, request fingerprints, records and their integrity rules,
//! the pure decision function, the store trait, and the request lifecycle that every front
//! door calls; with an in-memory store and the store conformance suite.
//!
//! # Layout
//! - [`key`]: the `Idempotency-Key` header (RFC 8941 sf-string or bare token).
//! - [`fingerprint`] and [`canonical`]: what makes two requests the same (RFC 8785 JSON).
//! - [`record`]: records, states, stored responses, leases.
//! - [`integrity`]: the one validation of stored records, and the response checksum.
//! - [`engine`]: the decision function.
//! - [`store`]: the [`IdempotencyStore`] trait (atomic primitives, no policy);
//!   [`memory`]: [`MemoryStore`].
//! - [`admin`]: the operator operations ([`admin::AdminStore`]: list a key's records,
//!   delete one exact record).
//! - [`events`]: what a holder tells the duplicates waiting on its key.
//! - [`gauges`]: [`StoreCount`], what a store holds, for `idemgate stats` and the metrics.
//! - [`counters`]: the lifecycle's counters, each series registered at 0 at start-up.
//! - [`lifecycle`]: begin (acquire, decide, reconcile), hold (renew), finish (record the
//!   outcome until it lands), with a deadline on every store call.
//! - [`seal`]: encryption at rest of stored responses ([`seal::Keyring`]).
//! - [`loghash`]: keyed hashes of keys and principals for logs.
//! - [`status`]: what an upstream's status does to its record (store, release, fail).
//!
//! # State machine
//! ```text
//!             acquire (first)                 complete(fence, response)
//!   (none) ───────────────────▶ in_progress ────────────────────────────▶ completed ──▶ (purged at expires_at)
//!                                  │  │  fail(fence)
//!                                  │  └──────────────────────────────────▶ failed ─────▶ (purged at expires_at)
//!                                  │ release(fence): nothing happened, retry allowed
//!                                  └──────────────────────────────────────▶ (none)
//!           lease expired + same fingerprint: outcome unknown (default; record kept, a late
//!           complete with the valid fence still lands) or, per route, takeover → fence+1
//! ```

pub mod admin;
pub mod canonical;
pub mod counters;
pub mod durability;
pub mod engine;
pub mod events;
pub mod fingerprint;
pub mod gauges;
pub mod integrity;
pub mod key;
pub mod lifecycle;
pub mod loghash;
#[cfg(feature = "memory")]
pub mod memory;
pub mod problem;
pub mod purge;
pub mod record;
pub mod redact;
pub mod report;
pub mod seal;
pub mod status;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;

pub use durability::{Durability, DurabilityLevel};
pub use engine::{decide, Decision, LeaseExpiredPolicy};
pub use fingerprint::Fingerprint;
pub use gauges::{GaugedStore, StoreCount};
pub use integrity::{response_checksum, RawRecord};
pub use key::{IdempotencyKey, KeyError};
pub use lifecycle::{
    Answer, Begin, Finished, Holder, Lifecycle, LifecycleConfig, Outcome, RoutePlan,
};
#[cfg(feature = "memory")]
pub use memory::MemoryStore;
pub use purge::{PurgeHandle, PurgeStopped};
pub use record::{
    now_millis, EncryptionKeyId, IdempotencyRecord, Lease, LeaseToken, RecordState, ScopedKey,
    StoredResponse, UnixMillis,
};
pub use store::{BoxError, IdempotencyStore, InsertOutcome, InsertRequest, Peeked, StoreError};
