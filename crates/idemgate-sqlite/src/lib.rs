//! idemgate's embedded default store: [`SqliteStore`], SQLite in WAL mode.
//!
//! Records live in one table, `idempotency_records`, keyed by (principal, route, key), with
//! an index on `expires_at` for purging. The schema is migrated on open (`PRAGMA
//! user_version`, in one transaction; each change is a new file under `migrations/`).
//!
//! One OS thread runs the writes on the read-write connection (a lone write, when no other
//! is in progress, runs on the caller's thread instead: `writer`), each one statement,
//! prepared and cached, that compare-and-sets on what the caller holds or saw: the insert
//! of `insert_or_get` (`INSERT ... ON CONFLICT DO UPDATE ... WHERE` the old row expired),
//! `take_over` (on the snapshot's fence, state and lease), and `renew`, `complete`, `fail`,
//! `release` (on state, fence, lease token and `expires_at`). Commands queued together share
//! one transaction (one commit), and a second thread checkpoints the WAL into the database
//! file, so the store thread never pays for it. On a file, reads run on a few read-only
//! connections: `insert_or_get` looks there first, so a replay or a `409` takes no write
//! lock and never queues behind writes. Every row read is decoded into an
//! [`idemgate_core::RawRecord`] and validated, with the response checksum stored next to
//! each completed response.
//!
//! ```
//! use std::time::Duration;
//!
//! use idemgate_core::testing::{fp, request, response, unique_key};
//! use idemgate_core::{IdempotencyStore, InsertOutcome, RecordState};
//! use idemgate_sqlite::SqliteStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = SqliteStore::open_in_memory()?; // or SqliteStore::open("idemgate.db", options)
//! let key = unique_key("alice");
//! let req = request(&key, fp(1), Duration::from_secs(10), Duration::from_secs(86_400));
//! let InsertOutcome::Inserted(lease) = store.insert_or_get(&req).await? else {
//!     unreachable!("a fresh key is inserted")
//! };
//! store.complete(&lease, &response(2)).await?;
//! let record = store.get(&key).await?.expect("stored");
//! assert_eq!(record.state, RecordState::Completed);
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//! - [`SqliteStore`]: the store (what it holds: [`idemgate_core::GaugedStore::gauges`]).
//! - [`SqliteOptions`], [`Synchronous`], [`SqliteLocation`]: settings and `sqlite://` URLs.
//! - [`SqliteStoreError`]: errors, converted into [`idemgate_core::StoreError`].
//! - [`idemgate_core::admin::AdminStore`] (`admin`): listing a key's rows, deleting one
//!   exact row, counting rows by state, for `idemgate inspect`, `release` and `stats`.
//! - Inside: `worker` (the store thread and its group commit), `writer` (the connection it
//!   shares with callers that find it idle), `ops` (the write SQL),
//!   `readers` and `row` (the read path and row decoding), `schema` (migrations),
//!   `checkpoint` (the WAL checkpointer), `file` (are the database, `-wal` and `-shm` files
//!   still the ones opened).
//!
//! # State machine
//! ```text
//!          insert_or_get (first)              complete(fence, response)
//!   (none) ───────────────────▶ in_progress ────────────────────────────▶ completed ──▶ (purged at expires_at)
//!                                  │  │  fail(fence)
//!                                  │  └──────────────────────────────────▶ failed ─────▶ (purged at expires_at)
//!                                  │ release(fence): nothing happened, retry allowed
//!                                  └──────────────────────────────────────▶ (none)
//!           lease expired (or failed), when the engine says so: take_over → in_progress, fence+1
//! ```
//!
//! # Durability
//! [`Synchronous::Normal`] (default) keeps every committed record through a crash of the
//! process; [`Synchronous::Full`] also through a power loss or OS crash, at the cost of an
//! `fsync` per transaction.

mod admin;
mod checkpoint;
mod error;
mod file;
mod gauges;
mod ops;
mod options;
mod readers;
mod row;
mod schema;
mod store;
mod worker;
mod writer;

pub use error::{Result, SqliteStoreError};
pub use gauges::{EXACT_COUNT_BELOW, EXPIRED_COUNT_CAP};
pub use options::{SqliteLocation, SqliteOptions, Synchronous};
pub use store::SqliteStore;
