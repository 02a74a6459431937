//! idemgate's embedded default store: [`SqliteStore`], SQLite in WAL mode.
//!
//! Records live in one table, `idempotency_records`, keyed by (principal, route, key), with
//! an index on `expires_at` for purging. The schema is migrated on open (`PRAGMA
//! user_version`, in one transaction). One OS thread owns the connection and runs the store
//! operations: `acquire` reads the row and applies [`idemgate_core::engine::apply_acquire`]
//! inside `BEGIN IMMEDIATE`; `renew`, `complete`, `fail` and `release` are single statements
//! that compare-and-set on (state, fence, lease token, `expires_at`). Commands queued
//! together share one transaction (one commit), and a second thread checkpoints the WAL
//! into the database file, so the store thread never pays for it.
//!
//! ```
//! use std::time::Duration;
//!
//! use idemgate_core::testing::{fp, request, response, unique_key};
//! use idemgate_core::{AcquireOutcome, IdempotencyStore, RecordState};
//! use idemgate_sqlite::SqliteStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = SqliteStore::open_in_memory()?; // or SqliteStore::open("idemgate.db", options)
//! let key = unique_key("alice");
//! let req = request(&key, fp(1), Duration::from_secs(10), Duration::from_secs(86_400));
//! let AcquireOutcome::Acquired { lease, .. } = store.acquire(&req).await? else {
//!     unreachable!("a fresh key is acquired")
//! };
//! store.complete(&lease, &response(2)).await?;
//! let record = store.get(&key).await?.expect("stored");
//! assert_eq!(record.state, RecordState::Completed);
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//! - [`SqliteStore`] and [`SqliteStats`]: the store, its metrics snapshot.
//! - [`SqliteOptions`], [`Synchronous`], [`SqliteLocation`]: settings and `sqlite://` URLs.
//! - [`SqliteStoreError`]: errors, converted into [`idemgate_core::StoreError`].
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
//!
//! # Durability
//! [`Synchronous::Normal`] (default) keeps every committed record through a crash of the
//! process; [`Synchronous::Full`] also through a power loss or OS crash, at the cost of an
//! `fsync` per transaction.

mod checkpoint;
mod error;
mod ops;
mod options;
mod schema;
mod store;
mod worker;

pub use error::{Result, SqliteStoreError};
pub use options::{SqliteLocation, SqliteOptions, Synchronous};
pub use store::{SqliteStats, SqliteStore};
