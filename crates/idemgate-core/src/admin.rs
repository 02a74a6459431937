//! Operator access to records: list the records of one idempotency key, delete one exact
//! record whatever its state, count what a store holds, and record the outcome an operator
//! established for a stuck key ([`resolve()`], from the store primitives). These back
//! `idemgate inspect`, `idemgate release`, `idemgate stats` and `idemgate resolve`; the
//! request path never calls them.
//!
//! Unlike [`IdempotencyStore`](crate::IdempotencyStore), nothing here validates: records
//! are returned raw ([`RawRecord`]) so that a corrupt one can still be seen and removed;
//! the caller runs [`RawRecord::validate`] to say what is wrong with it.

use std::future::Future;

use crate::key::IdempotencyKey;
use crate::record::{RecordState, ScopedKey, UnixMillis};
use crate::store::Result;
use crate::RawRecord;

mod resolve;

pub use resolve::{
    check_resolvable, is_reserved, resolution_of, resolve, resolved_detail, NotResolvable,
    Operator, OperatorOutcome, Resolution, ResolveError, Resolved, MAX_DETAIL_BYTES,
    RESOLVED_DETAIL_HEADER, RESOLVED_HEADER, RESOLVE_LEASE_TTL,
};

/// Which records of one idempotency key to list: every scope, or only those of a route
/// and/or a principal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyFilter {
    /// The client's `Idempotency-Key`.
    pub key: IdempotencyKey,
    /// The route template, e.g. `POST /payments`; `None` for every route.
    pub route: Option<String>,
    /// The principal, e.g. `auth:<hex>`; `None` for every principal.
    pub principal: Option<String>,
}

impl KeyFilter {
    /// The exact scope, when both the route and the principal are given (a point lookup).
    pub fn exact(&self) -> Option<ScopedKey> {
        Some(ScopedKey {
            principal: self.principal.clone()?,
            route: self.route.clone()?,
            key: self.key.clone(),
        })
    }

    /// True when `scope` is selected.
    pub fn matches(&self, scope: &ScopedKey) -> bool {
        scope.key == self.key
            && self.route.as_ref().is_none_or(|r| *r == scope.route)
            && self
                .principal
                .as_ref()
                .is_none_or(|p| *p == scope.principal)
    }
}

/// What [`AdminStore::list_key`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listing {
    /// The store's clock at the read, in ms since the epoch.
    pub now: UnixMillis,
    /// Every matching record held, expired ones not yet purged included, unvalidated,
    /// ordered by (route, principal).
    pub records: Vec<RawRecord>,
}

/// What a store holds, by one scan. Times in ms since the epoch (store clock).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AdminStats {
    /// The store's clock at the scan.
    pub now: UnixMillis,
    /// Records held, expired ones not yet purged included.
    pub records: u64,
    /// Records in state `in_progress`.
    pub in_progress: u64,
    /// Records in state `completed`.
    pub completed: u64,
    /// Records in state `failed`.
    pub failed: u64,
    /// Records whose state is missing or unknown (corrupt).
    pub unknown_state: u64,
    /// Live `in_progress` records whose lease has lapsed (or is missing): the holder died,
    /// and retries answer `outcome-unknown` or take over, per route.
    pub stuck_in_progress: u64,
    /// Sum of the stored response bodies, in bytes.
    pub body_bytes: u64,
    /// `created_at` of the oldest record held; `None` when empty.
    pub oldest_created_at: Option<UnixMillis>,
    /// Records past their `expires_at` still held, waiting for a purge (always 0 on a
    /// store that expires records by itself, like Redis).
    pub expired: u64,
}

impl AdminStats {
    /// Counts `raw` into the totals (for stores that scan records in the client).
    pub fn add(&mut self, raw: &RawRecord) {
        let body = raw.body.as_ref().map_or(0, |b| b.len() as u64);
        let times = (raw.lease_expires_at, raw.created_at, raw.expires_at);
        self.add_fields(raw.state.as_deref(), times, body);
    }

    /// Counts one record from its state, `(lease_expires_at, created_at, expires_at)` (ms,
    /// `None` when missing or unreadable) and stored body size in bytes.
    pub fn add_fields(
        &mut self,
        state: Option<&str>,
        (lease_expires_at, created_at, expires_at): (Option<i64>, Option<i64>, Option<i64>),
        body_bytes: u64,
    ) {
        self.records += 1;
        let live = expires_at.is_none_or(|e| e > self.now);
        match state.and_then(RecordState::parse) {
            Some(RecordState::InProgress) => {
                self.in_progress += 1;
                let lapsed = lease_expires_at.is_none_or(|l| l <= self.now);
                self.stuck_in_progress += u64::from(live && lapsed);
            }
            Some(RecordState::Completed) => self.completed += 1,
            Some(RecordState::Failed) => self.failed += 1,
            None => self.unknown_state += 1,
        }
        self.body_bytes += body_bytes;
        if let Some(c) = created_at {
            self.oldest_created_at = Some(self.oldest_created_at.map_or(c, |o| o.min(c)));
        }
        self.expired += u64::from(!live);
    }
}

/// True when the stored record `current` is still the one an operator was shown (`seen`):
/// same scope, state, fence, lease token, lease expiry, creation and expiry times. A
/// holder that renewed, completed, failed or took over the record since, or a new record
/// under the same key, makes it differ. Stores that compare in the client use this; SQL
/// stores compare the same columns in their `DELETE`.
pub fn same_record(seen: &RawRecord, current: &RawRecord) -> bool {
    seen.key == current.key
        && seen.state == current.state
        && seen.fence == current.fence
        && seen.lease_token == current.lease_token
        && seen.lease_expires_at == current.lease_expires_at
        && seen.created_at == current.created_at
        && seen.expires_at == current.expires_at
}

/// Operator operations of a backend, next to its [`crate::IdempotencyStore`] primitives.
/// None of them validates records, so a corrupt record can be listed and deleted.
pub trait AdminStore: Send + Sync + 'static {
    /// Every record of `filter`'s key, in the selected scopes, expired ones included. A
    /// lookup without route and principal may scan the store (an index is used where the
    /// store has one; Redis scans the key prefix on every primary).
    ///
    /// # Errors
    /// A backend error ([`crate::StoreError::Unavailable`], ...); never `Corrupt`.
    fn list_key(&self, filter: &KeyFilter) -> impl Future<Output = Result<Listing>> + Send;

    /// Deletes the record `seen.key` names if it is still exactly `seen` ([`same_record`]),
    /// whatever its state, lease or fence: an operator override. Returns false, deleting
    /// nothing, when the record changed or is gone.
    ///
    /// # Errors
    /// A backend error.
    fn delete_exact(&self, seen: &RawRecord) -> impl Future<Output = Result<bool>> + Send;

    /// Counts what the store holds (O(records)).
    ///
    /// # Errors
    /// A backend error.
    fn admin_stats(&self) -> impl Future<Output = Result<AdminStats>> + Send;
}

/// Implements [`AdminStore`] for a test wrapper by delegating to its field `$field` (see
/// [`crate::delegate_store!`]).
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
            async fn admin_stats(
                &self,
            ) -> ::std::result::Result<$crate::admin::AdminStats, $crate::StoreError> {
                self.$field.admin_stats().await
            }
        }
    };
}
