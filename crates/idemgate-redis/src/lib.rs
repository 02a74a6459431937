//! idemgate's Redis store: [`RedisStore`], fast, on one server, a Sentinel-monitored primary
//! or Redis Cluster, with weaker guarantees than the SQL stores (see
//! [Guarantees](#guarantees)).
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use idemgate_core::fingerprint::{Fingerprint, CURRENT_VERSION};
//! use idemgate_core::{
//!     IdempotencyKey, IdempotencyStore, InsertOutcome, InsertRequest, LeaseToken, ScopedKey,
//! };
//! use idemgate_redis::RedisStore;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let store = RedisStore::connect("redis://127.0.0.1:6379")
//!     .await?
//!     .with_key_prefix("idemgate:")?;
//! for warning in store.check_server().await? {
//!     eprintln!("warning: {warning}");
//! }
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
//!         // the core's engine judges what the record means (replay, in flight, ...);
//!         // the request lifecycle in idemgate_core drives all of this for you
//! #       let _ = (record, now);
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - [`RedisStore`] (`store.rs`): the connection (a reconnecting
//!   [`redis::aio::ConnectionManager`], a [`redis::cluster_async::ClusterConnection`], or
//!   the primary the Sentinels name, `sentinel.rs`) and the store primitives;
//!   [`RedisOptions`] and store URLs (`options.rs`; connecting,
//!   [`RedisStore::from_url`] and [`RedisStore::check_url`] in `url.rs`).
//! - `wait.rs`: writes that wait for replicas ([`RedisOptions::wait_replicas`], `WAIT`), each
//!   on a connection of its own.
//! - `durability.rs`: [`idemgate_core::gauges::GaugedStore::durability`], read from the
//!   server.
//! - `scripts/*.lua` (`scripts.rs`): one Lua script per primitive, each prefixed with
//!   `scripts/common.lua`, run with `EVALSHA` (loaded again on `NOSCRIPT`).
//! - `admin.rs`: [`idemgate_core::admin::AdminStore`] for `idemgate inspect`, `release` and
//!   `stats` (`SCAN` of the key prefix on the server or on every cluster primary, and
//!   `scripts/admin_delete.lua`, the exact delete).
//! - `key.rs`: record keys. `record.rs`: record hashes to records.
//! - [`RedisStore::check_server`] and [`ServerWarning`] (`check.rs`): the start-up check.
//! - [`RedisStoreError`] (`error.rs`): errors and their classification into
//!   [`idemgate_core::StoreError`].
//!
//! # State machine
//! ```text
//!             insert (first)                  complete(fence, response)
//!   (none) ───────────────────▶ in_progress ────────────────────────────▶ completed ──▶ (expired by Redis at expires_at)
//!                                  │  │  fail(fence)
//!                                  │  └──────────────────────────────────▶ failed ─────▶ (expired by Redis at expires_at)
//!                                  │ release(fence): nothing happened, retry allowed
//!                                  └──────────────────────────────────────▶ (none)
//!           take_over(snapshot): in_progress with fence+1, if the record is unchanged
//! ```
//! Each primitive is one Lua script holding a compare-and-set, never a rule:
//! `insert_or_get` inserts when the key holds no live record (a record past `expires_at`
//! is replaced with fence + 1) and returns the live record untouched otherwise;
//! `take_over` succeeds only if the record still has the state, fence, lease token and
//! lease expiry that were read; `renew`, `complete`, `fail` and `release` are fenced on
//! (state `in_progress`, fence, lease token, record not expired), not on the lease's own
//! expiry, so a late outcome of a live fence lands. Whether a record replays, waits or is
//! taken over is the core's call ([`idemgate_core::engine`]), never this crate's.
//!
//! Every record read is decoded through [`idemgate_core::RawRecord::validate`] (plus a
//! check that the scope stored in the hash is the one looked up), so a damaged record is
//! [`idemgate_core::StoreError::Corrupt`] exactly as on the other stores. A completed
//! record carries [`idemgate_core::response_checksum`] in field `cs`; records written
//! before checksums existed have none and are checked by the other rules.
//!
//! # Keys and records
//! One record is one Redis hash, under `<prefix>{<hex SHA-256>}`: the digest covers the
//! length-prefixed principal, route and key, so the scope stays exact, and the braces make
//! it the cluster hash tag, so every operation touches one key on one slot. The prefix
//! defaults to `idemgate:`. The hash holds the scope (compared on every read), the
//! fingerprint, state, fence, lease, timestamps and the response (status, headers, raw
//! body bytes, checksum); the key carries `PEXPIREAT expires_at`. A record never expires under a
//! live lease: insert, take-over and renew push `expires_at` (and the key's expiry) to at
//! least the lease's end. All times are the server's (`TIME` inside the scripts), so
//! gateways with skewed clocks agree (DESIGN.md, "Clocks").
//!
//! # Expiry and purge
//! Redis deletes each record itself at its `expires_at`, so
//! [`idemgate_core::IdempotencyStore::purge_expired`] has nothing to do and returns 0; an
//! expired record reads as absent (the scripts also compare `expires_at` with `TIME`).
//!
//! # Guarantees
//! A record is acknowledged once the primary executed the script, in memory. It can still
//! be lost, and **a retry of a lost key runs the operation again**:
//! - **persistence**: with `appendonly no`, a restart loses everything since the last RDB
//!   snapshot; with `appendfsync everysec` (Redis' default when the AOF is on) a crash of
//!   the machine loses up to about one second; only `appendfsync always` writes each
//!   record to disk before answering;
//! - **failover**: replication is asynchronous, so a replica promoted after the primary
//!   died may miss the last records. [`RedisOptions::wait_replicas`] narrows the window
//!   (each fresh insert and outcome write waits for that many replicas with `WAIT`, and a
//!   write they did not acknowledge is answered `503`, never run), but does not close it:
//!   `WAIT` does not make Redis strongly consistent;
//! - **eviction**: under any `maxmemory-policy` but `noeviction`, a full server deletes
//!   keys, and records (all with TTLs) are candidates even for `volatile-*` policies.
//!
//! Recommended: `maxmemory-policy noeviction` (a full server then refuses new records:
//! [`idemgate_core::StoreError::Unavailable`], `503`, never a double execution),
//! `appendonly yes`, and `appendfsync always` for the strongest guarantee or `everysec` as
//! the usual trade-off. [`RedisStore::check_server`] reports the risky settings. For money,
//! prefer the PostgreSQL store. See the crate's `README.md` for the operations guide.

mod admin;
mod check;
mod conn;
mod durability;
mod error;
mod events;
mod gauges;
mod key;
mod options;
mod record;
mod scripts;
mod sentinel;
mod store;
mod url;
mod wait;

pub use check::ServerWarning;
pub use error::{RedisStoreError, Result};
pub use gauges::{SAMPLE_KEYS, SCAN_ALL_BELOW};
pub use key::{DEFAULT_KEY_PREFIX, MAX_KEY_PREFIX_BYTES};
pub use options::RedisOptions;
pub use store::RedisStore;
