//! idemgate's PostgreSQL store: [`PostgresStore`], the only store that can complete a key in
//! the same transaction as the business operation ([`PostgresStore::complete_using`]).
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use idemgate_core::fingerprint::{Fingerprint, CURRENT_VERSION};
//! use idemgate_core::{
//!     AcquireOutcome, AcquireRequest, DecisionPolicy, IdempotencyKey, IdempotencyStore,
//!     LeaseToken, ScopedKey,
//! };
//! use idemgate_postgres::PostgresStore;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let store = PostgresStore::connect("postgres://app@127.0.0.1:5432/app")
//!     .await?
//!     .with_table_name("idempotency_records")?;
//! store.migrate().await?;
//!
//! let request = AcquireRequest {
//!     key: ScopedKey {
//!         principal: "alice".into(),
//!         route: "POST /payments".into(),
//!         key: IdempotencyKey::new("8e03978e-40d5-43e8-bc93-6894a57f9324")?,
//!     },
//!     fingerprint: Fingerprint { version: CURRENT_VERSION, digest: [0; 32] },
//!     token: LeaseToken::random(),
//!     lease_ttl: Duration::from_secs(10),
//!     record_ttl: Duration::from_secs(24 * 3600),
//!     policy: DecisionPolicy::default(),
//! };
//! match store.acquire(&request).await? {
//!     AcquireOutcome::Acquired { lease, .. } => {
//!         // run the operation, then store its response:
//!         // store.complete(&lease, &response).await?;
//! #       let _ = lease;
//!     }
//!     AcquireOutcome::Existing { record, now } => {
//!         // idemgate_core::decide(Some(&record), &request.fingerprint, now, &policy)
//! #       let _ = (record, now);
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - [`PostgresStore`] (`store.rs`): pool, configuration, the store primitives and
//!   [`PostgresStore::complete_using`].
//! - `acquire.rs`: the acquire loop (insert, read, decide, conditional update).
//! - `sql.rs`: the SQL of every statement, built once per table name.
//! - `migrate.rs` and `migrations/*.sql`: the embedded migrations ([`PostgresStore::migrate`]).
//! - `row.rs`: rows to records. [`PostgresStoreError`] (`error.rs`): errors and their
//!   classification into [`idemgate_core::StoreError`].
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
//! The rules are the core's ([`idemgate_core::engine::decide`]), evaluated on the database
//! clock (DESIGN.md, "Clocks"); `renew`, `complete`, `fail` and `release` are
//! compare-and-set on (state `in_progress`, fence, lease token, not expired).
//!
//! # Schema
//! One table (default `idempotency_records`), primary key `(user_id, route, key)`, columns
//! `request_hash`, `fingerprint_version`, `state` (CHECK: `in_progress`, `completed`,
//! `failed`), `status`, `response_headers`, `response` (raw body bytes), `replayable`,
//! `lease_token`, `lease_expires_at`, `fence`, `created_at`, `completed_at`, `expires_at`
//! (all times `timestamptz`, in whole milliseconds), and an index on `expires_at` over
//! every state for the purge. See `migrations/0001_idempotency_records.sql`.

mod acquire;
mod error;
mod migrate;
mod row;
mod sql;
mod store;

pub use error::{PostgresStoreError, Result};
pub use store::PostgresStore;
