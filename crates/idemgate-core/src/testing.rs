//! The store conformance suite: every backend runs the same cases.
//!
//! In a store crate's tests:
//! ```text
//! idemgate_core::store_conformance!(my_crate_tests::make_store, my_crate_tests::damage);
//! ```
//! where `make_store` is an `async fn() -> Option<impl IdempotencyStore>` that returns a store with
//! its own namespace (table, schema or key prefix) for each call: the purge cases count every
//! expired record the store holds, so cases must not share one. `damage` is an
//! `async fn(&S, &ScopedKey, Damage)` that edits the stored record behind the store's back
//! (raw SQL, raw Redis commands), so that every store is shown to refuse the same damage.
//! Each case becomes one `#[tokio::test]`. Lease and TTL expiry use short real durations,
//! because SQL and Redis stores judge time by their own clock.

use std::time::Duration;

use bytes::Bytes;

use crate::fingerprint::{Fingerprint, CURRENT_VERSION};
use crate::key::IdempotencyKey;
use crate::record::{IdempotencyRecord, Lease, LeaseToken, ScopedKey, StoredResponse, UnixMillis};
use crate::store::{IdempotencyStore, InsertOutcome, InsertRequest};

mod admin;
mod cases;
mod damage;
mod expiry;
mod peek;
mod resolve;
mod sealed;

pub use admin::*;
pub use cases::*;
pub use damage::*;
pub use expiry::*;
pub use peek::*;
pub use resolve::*;
pub use sealed::*;

/// A key unique to this process and call.
pub fn unique_key(principal: &str) -> ScopedKey {
    ScopedKey {
        principal: principal.to_owned(),
        route: "POST /payments".to_owned(),
        key: IdempotencyKey::new(&format!("key-{:016x}", rand::random::<u64>())).unwrap(),
    }
}

/// A fingerprint whose digest is `n` repeated.
pub fn fp(n: u8) -> Fingerprint {
    Fingerprint {
        version: CURRENT_VERSION,
        digest: [n; 32],
    }
}

/// An insert request with a fresh token and the given lease and record TTLs.
pub fn request(key: &ScopedKey, f: Fingerprint, lease: Duration, ttl: Duration) -> InsertRequest {
    InsertRequest {
        key: key.clone(),
        fingerprint: f,
        token: LeaseToken::random(),
        lease_ttl: lease,
        record_ttl: ttl,
    }
}

/// A response with a binary body of `len` bytes and a non-UTF-8 header value.
pub fn response(len: usize) -> StoredResponse {
    StoredResponse {
        status: 201,
        headers: vec![
            (
                "content-type".into(),
                Bytes::from_static(b"application/json"),
            ),
            ("location".into(), Bytes::from_static(b"/payments/1")),
            ("x-raw".into(), Bytes::from_static(b"\xff\x80")),
        ],
        body: (0..len).map(|i| (i * 31 % 256) as u8).collect(),
        replayable: true,
        sealed_by: None,
    }
}

/// Inserts `key` (fingerprint `f`, 60 s lease, 24 h TTL) and returns the lease.
///
/// # Panics
/// If the key holds a live record or the store fails.
pub async fn insert<S: IdempotencyStore>(s: &S, key: &ScopedKey, f: Fingerprint) -> Lease {
    inserted(s.insert_or_get(&request(key, f, LONG, DAY)).await.unwrap())
}

pub(crate) const LONG: Duration = Duration::from_secs(60);
pub(crate) const DAY: Duration = Duration::from_secs(86_400);
pub(crate) const SHORT_LEASE: Duration = Duration::from_millis(300);
/// A lease shorter than the short TTLs: a record never expires under a live lease.
pub(crate) const TINY_LEASE: Duration = Duration::from_millis(100);

/// The lease of an `Inserted` outcome.
///
/// # Panics
/// On `Existing`.
pub fn inserted(o: InsertOutcome) -> Lease {
    match o {
        InsertOutcome::Inserted(lease) => lease,
        InsertOutcome::Existing { record, .. } => panic!("expected Inserted, got {record:?}"),
    }
}

/// The record and store clock of an `Existing` outcome.
///
/// # Panics
/// On `Inserted`.
pub fn existing(o: InsertOutcome) -> (IdempotencyRecord, UnixMillis) {
    match o {
        InsertOutcome::Existing { record, now } => (record, now),
        InsertOutcome::Inserted(lease) => panic!("expected Existing, got {lease:?}"),
    }
}

/// What a backend does by itself that changes what the suite can observe. Pass it as the
/// third argument of [`crate::store_conformance!`]; the default is "nothing special".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreCapabilities {
    /// The backend deletes each record at its `expires_at` by itself (Redis `PEXPIREAT`),
    /// so `purge_expired` never finds anything and returns 0. The purge case then checks
    /// that expired records read as absent, that purge returns 0 and that live records
    /// survive, instead of counting deletions.
    pub native_expiry: bool,
}

/// Expands to one `#[tokio::test]` per conformance case, each with a fresh store from
/// `$make` (an `async fn() -> Option<impl IdempotencyStore>`; `None` skips the case, after
/// the maker printed why), damaging records with `$damage` (see the module docs).
/// An optional third argument, a [`StoreCapabilities`](crate::testing::StoreCapabilities)
/// expression, says what the backend does by itself (e.g. native expiry).
#[macro_export]
macro_rules! store_conformance {
    ($make:path, $damage:path) => {
        $crate::store_conformance!($make, $damage, $crate::testing::StoreCapabilities::default());
    };
    ($make:path, $damage:path, $caps:expr) => {
        $crate::store_conformance!(@cases $make;
            fresh_insert, concurrent_inserts_have_one_winner, complete_then_replay,
            not_replayable_is_kept, takeover_and_stale_fence, take_over_refuses_a_stale_snapshot,
            late_outcome_after_lapse_lands, renewal_keeps_the_snapshot_fresh,
            renewal_outlives_record_ttl, concurrent_takeover_has_one_winner,
            fail_then_take_over, release_allows_retry, scope_isolates_records,
            expired_ttl_counts_as_absent, purge_spares_reacquired,
            peek_agrees_with_insert_or_get, sealed_responses_are_kept_and_opened,
            lifecycle_seals_what_it_stores);
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn purge_in_batches() {
            if let Some(store) = $make().await {
                $crate::testing::purge_in_batches_with(store, $caps).await;
            }
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn damaged_records_are_refused() {
            if let Some(store) = $make().await {
                for damage in $crate::testing::Damage::ALL {
                    let key = $crate::testing::completed_record(&store).await;
                    $damage(&store, &key, damage).await;
                    $crate::testing::assert_damage_refused(&store, &key, damage).await;
                }
            }
        }
    };
    (@cases $make:path; $($case:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                if let Some(store) = $make().await {
                    $crate::testing::$case(store).await;
                }
            }
        )*
    };
}

/// Implements [`IdempotencyStore`] for a test wrapper (one that cleans its namespace up on
/// drop) by delegating every method to its field `$field`. With `on_insert = method`, the
/// wrapper's `method(&key)` is called before each `insert_or_get` (e.g. to remember keys to
/// delete).
#[macro_export]
macro_rules! delegate_store {
    ($ty:ty, $field:ident $(, on_insert = $hook:ident)?) => {
        impl $crate::IdempotencyStore for $ty {
            async fn insert_or_get(
                &self,
                req: &$crate::InsertRequest,
            ) -> ::std::result::Result<$crate::InsertOutcome, $crate::StoreError> {
                $(self.$hook(&req.key);)?
                self.$field.insert_or_get(req).await
            }
            async fn take_over(
                &self,
                seen: &$crate::IdempotencyRecord,
                token: $crate::LeaseToken,
                lease_ttl: ::std::time::Duration,
            ) -> ::std::result::Result<::std::option::Option<$crate::Lease>, $crate::StoreError> {
                self.$field.take_over(seen, token, lease_ttl).await
            }
            async fn renew(
                &self,
                lease: &$crate::Lease,
                ttl: ::std::time::Duration,
            ) -> ::std::result::Result<$crate::UnixMillis, $crate::StoreError> {
                self.$field.renew(lease, ttl).await
            }
            async fn complete(
                &self,
                lease: &$crate::Lease,
                r: &$crate::StoredResponse,
            ) -> ::std::result::Result<(), $crate::StoreError> {
                self.$field.complete(lease, r).await
            }
            async fn fail(&self, lease: &$crate::Lease) -> ::std::result::Result<(), $crate::StoreError> {
                self.$field.fail(lease).await
            }
            async fn release(
                &self,
                lease: &$crate::Lease,
            ) -> ::std::result::Result<(), $crate::StoreError> {
                self.$field.release(lease).await
            }
            async fn get(
                &self,
                key: &$crate::ScopedKey,
            ) -> ::std::result::Result<::std::option::Option<$crate::IdempotencyRecord>, $crate::StoreError> {
                self.$field.get(key).await
            }
            async fn peek(
                &self,
                key: &$crate::ScopedKey,
            ) -> ::std::result::Result<$crate::Peeked, $crate::StoreError> {
                self.$field.peek(key).await
            }
            async fn insert_or_get_unseen(
                &self,
                req: &$crate::InsertRequest,
            ) -> ::std::result::Result<$crate::InsertOutcome, $crate::StoreError> {
                $(self.$hook(&req.key);)?
                self.$field.insert_or_get_unseen(req).await
            }
            async fn purge_expired(
                &self,
                batch: ::std::num::NonZeroU32,
            ) -> ::std::result::Result<u64, $crate::StoreError> {
                self.$field.purge_expired(batch).await
            }
            async fn ping(&self) -> ::std::result::Result<(), $crate::StoreError> {
                self.$field.ping().await
            }
            async fn announce(
                &self,
                event: &$crate::events::KeyEvent,
            ) -> ::std::result::Result<(), $crate::StoreError> {
                self.$field.announce(event).await
            }
            async fn write_announced(
                &self,
                lease: &$crate::Lease,
                write: $crate::store::OutcomeWrite<'_>,
                event: &$crate::events::KeyEvent,
            ) -> ::std::result::Result<(), $crate::StoreError> {
                self.$field.write_announced(lease, write, event).await
            }
            async fn listen(&self, sink: $crate::events::EventSink) {
                self.$field.listen(sink).await
            }
            fn event_poll(&self) -> ::std::time::Duration {
                self.$field.event_poll()
            }
            fn backend(&self) -> &'static str {
                self.$field.backend()
            }
        }
    };
}

/// Implements [`crate::admin::AdminStore`] and [`crate::GaugedStore`] for a test wrapper by
/// delegating to its field `$field` (see [`crate::delegate_store!`]).
#[macro_export]
macro_rules! delegate_admin {
    ($ty:ty, $field:ident) => {
        impl $crate::admin::AdminStore for $ty {
            async fn list_key(
                &self,
                filter: &$crate::admin::KeyFilter,
            ) -> ::std::result::Result<$crate::admin::Listing, $crate::StoreError> {
                self.$field.list_key(filter).await
            }
            async fn delete_exact(
                &self,
                seen: &$crate::RawRecord,
            ) -> ::std::result::Result<bool, $crate::StoreError> {
                self.$field.delete_exact(seen).await
            }
        }
        impl $crate::GaugedStore for $ty {
            async fn gauges(
                &self,
            ) -> ::std::result::Result<$crate::StoreCount, $crate::StoreError> {
                self.$field.gauges().await
            }
            async fn count_exact(
                &self,
            ) -> ::std::result::Result<$crate::StoreCount, $crate::StoreError> {
                self.$field.count_exact().await
            }
            async fn count_sealed(
                &self,
            ) -> ::std::result::Result<
                ::std::option::Option<::std::vec::Vec<(::std::string::String, u64)>>,
                $crate::StoreError,
            > {
                self.$field.count_sealed().await
            }
            async fn count_expired(
                &self,
                limit: ::std::num::NonZeroU32,
            ) -> ::std::result::Result<::std::option::Option<u64>, $crate::StoreError> {
                self.$field.count_expired(limit).await
            }
        }
    };
}

/// Expands to one `#[tokio::test]` per conformance case of the operator operations
/// ([`crate::admin::AdminStore`]), for a store that implements both traits; the arguments
/// are those of [`crate::store_conformance!`].
#[macro_export]
macro_rules! admin_conformance {
    ($make:path, $damage:path) => {
        $crate::admin_conformance!(
            $make,
            $damage,
            $crate::testing::StoreCapabilities::default()
        );
    };
    ($make:path, $damage:path, $caps:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn admin_lists_every_scope_of_a_key() {
            if let Some(store) = $make().await {
                $crate::testing::admin_lists_every_scope_of_a_key(store).await;
            }
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn admin_delete_is_exact() {
            if let Some(store) = $make().await {
                $crate::testing::admin_delete_is_exact(store).await;
            }
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn admin_corrupt_records_are_listed_and_deleted() {
            if let Some(store) = $make().await {
                for damage in $crate::testing::ADMIN_DAMAGES {
                    let key = $crate::testing::completed_record(&store).await;
                    $damage(&store, &key, damage).await;
                    $crate::testing::assert_corrupt_listed_and_deleted(&store, &key, damage).await;
                }
            }
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn admin_resolve_fences_out_the_holder() {
            if let Some(store) = $make().await {
                $crate::testing::admin_resolve_fences_out_the_holder(store).await;
            }
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn admin_resolve_refuses_a_changed_record() {
            if let Some(store) = $make().await {
                $crate::testing::admin_resolve_refuses_a_changed_record(store).await;
            }
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn admin_resolve_not_replayable_keeps_the_detail() {
            if let Some(store) = $make().await {
                $crate::testing::admin_resolve_not_replayable_keeps_the_detail(store).await;
            }
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn admin_stats_count_by_state() {
            if let Some(store) = $make().await {
                $crate::testing::admin_stats_count_by_state(store, $caps).await;
            }
        }
    };
}
