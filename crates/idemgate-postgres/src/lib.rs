//! idemgate's PostgreSQL store: [`PostgresStore`], the only store that can complete a key in
//! the same transaction as the business operation ([`PostgresStore::complete_using`]).
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use idemgate_core::fingerprint::{Fingerprint, CURRENT_VERSION};
//! use idemgate_core::{
//!     IdempotencyKey, IdempotencyStore, InsertOutcome, InsertRequest, LeaseToken, ScopedKey,
//! };
//! use idemgate_postgres::{PostgresOptions, PostgresStore};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let options = PostgresOptions::new().with_statement_timeout(Some(Duration::from_secs(2)));
//! let store = PostgresStore::connect_with("postgres://app@127.0.0.1:5432/app", &options)
//!     .await?
//!     .with_table_name("idempotency_records")?;
//! store.migrate().await?;
//!
//! let request = InsertRequest {
//!     key: ScopedKey {
//!         principal: "alice".into(),
//!         route: "POST /payments".into(),
//!         key: IdempotencyKey::new("8e03978e-40d5-43e8-bc93-6894a57f9324")?,
//!     },
//!     fingerprint: Fingerprint { version: CURRENT_VERSION, digest: [0; 32] },
//!     token: LeaseToken::random(),
//!     lease_ttl: Duration::from_secs(10),
//!     record_ttl: Duration::from_secs(24 * 3600),
//! };
//! match store.insert_or_get(&request).await? {
//!     InsertOutcome::Inserted(lease) => {
//!         // run the operation, then store its response:
//!         // store.complete(&lease, &response).await?;
//! #       let _ = lease;
//!     }
//!     InsertOutcome::Existing { record, now } => {
//!         // what the record means is the engine's call (idemgate_core::engine), on the
//!         // database clock `now`; a take-over is `store.take_over(&record, token, ttl)`.
//! #       let _ = (record, now);
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - [`PostgresStore`] (`store.rs`): pool, configuration, migration and
//!   [`PostgresStore::complete_using`]; [`PostgresOptions`] (`options.rs`): the statement
//!   and pool timeouts that bound every call.
//! - `primitives.rs`: the [`idemgate_core::IdempotencyStore`] primitives; `insert.rs`: the
//!   insert-or-get loop (insert or read, read again, replace an expired record) and the
//!   take-over compare-and-set.
//! - `sync.rs`: [`PostgresOptions::with_require_synchronous_replication`] (the session
//!   check, the refusal of new keys, the write permits, the confirmation of each write);
//!   `guarded.rs`: the runner of those writes (a permit, a task of its own, the
//!   confirmation); `durability.rs`: [`idemgate_core::gauges::GaugedStore::durability`], read from the
//!   replication settings and the standbys.
//! - `journal.rs`: the forward journal ([`ForwardJournalOptions`]): a local file of the
//!   keys this process acquired, written back after a failover that lost them.
//! - `sql.rs`: the SQL of every statement, built once per table name.
//! - `url.rs`: [`PostgresStore::from_url`] and [`PostgresStore::check_url`] (`postgres://`);
//!   `hosts.rs`: libpq's host lists (`h1:5432,h2:5433`) and `target_session_attrs`.
//! - `connect.rs`: the pool's host, the checks of every new connection (standby, system
//!   identifier, timeline: `connect/server.rs`); `connect/search.rs`: the search of the
//!   URL's hosts and the watcher that follows a failover.
//! - `migrate.rs` and `migrations/*.sql`: the embedded migrations ([`PostgresStore::migrate`]).
//! - `admin.rs`: [`idemgate_core::admin::AdminStore`] (list a key's rows, delete one
//!   exact row, count rows by state) for `idemgate inspect`, `release` and `stats`.
//! - `row.rs`: rows to [`idemgate_core::RawRecord`], validated by the core.
//!   [`PostgresStoreError`] (`error.rs`): errors and their classification into
//!   [`idemgate_core::StoreError`].
//!
//! # State machine
//! ```text
//!             insert (first)                  complete(fence, response)
//!   (none) ───────────────────▶ in_progress ────────────────────────────▶ completed ──▶ (purged at expires_at)
//!                                  │  │  fail(fence)
//!                                  │  └──────────────────────────────────▶ failed ─────▶ (purged at expires_at)
//!                                  │ release(fence): nothing happened, retry allowed
//!                                  └──────────────────────────────────────▶ (none)
//!           take_over(snapshot) when the engine says so → in_progress with fence+1
//! ```
//! The store holds no rules: it inserts, reads, and writes by compare-and-set on the
//! database clock (DESIGN.md, "Clocks"). `renew`, `complete`, `fail` and `release` check
//! (state `in_progress`, fence, lease token, record not expired), never the lease's own
//! expiry; `take_over` checks the snapshot that was read (fence, state, lease token, lease
//! expiry). Every record read is decoded through [`idemgate_core::RawRecord::validate`],
//! with the stored response's checksum, so a damaged record is never replayed.
//!
//! # Schema
//! One table (default `idempotency_records`), primary key `(user_id, route, key)`, columns
//! `request_hash`, `fingerprint_version`, `state` (CHECK: `in_progress`, `completed`,
//! `failed`), `status`, `response_headers`, `response` (raw body bytes), `replayable`,
//! `response_checksum` and `response_checksum_fence` (the fence it was written at),
//! `lease_token`, `lease_expires_at`, `fence`, `created_at`, `completed_at`, `expires_at`
//! (all times `timestamptz`, in whole milliseconds), and an index on `expires_at` over
//! every state for the purge. See `migrations/*.sql`: every migration keeps the table
//! usable by the build before it, so replicas can be upgraded one at a time.

mod admin;
mod connect;
mod durability;
mod error;
mod events;
mod gauges;
mod guarded;
mod hosts;
mod insert;
mod journal;
mod migrate;
mod options;
mod primitives;
mod row;
mod sql;
mod store;
mod sync;
mod url;

pub use error::{PostgresStoreError, Result};
pub use gauges::{EXACT_COUNT_BELOW, EXPIRED_COUNT_CAP};
pub use journal::ForwardJournalOptions;
pub use options::PostgresOptions;
pub use store::PostgresStore;
