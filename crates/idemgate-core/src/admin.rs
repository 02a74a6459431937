//! Operator access to records: list the records of one idempotency key, delete one exact
//! record whatever its state, and record the outcome an operator established for a stuck
//! key ([`resolve()`], from the store primitives). These back `idemgate inspect`,
//! `idemgate release` and `idemgate resolve` (`idemgate stats` reads
//! [`crate::GaugedStore::gauges`]); the request path never calls them.
//!
//! Unlike [`IdempotencyStore`](crate::IdempotencyStore), nothing here validates: records
//! are returned raw ([`RawRecord`]) so that a corrupt one can still be seen and removed;
//! the caller runs [`RawRecord::validate`] to say what is wrong with it.

use std::future::Future;

use crate::key::IdempotencyKey;
use crate::record::{ScopedKey, UnixMillis};
use crate::store::Result;
use crate::RawRecord;

mod resolve;

pub use resolve::{
    check_resolvable, is_reserved, resolution_of, resolve, resolve_sealed, resolved_detail,
    NotResolvable, Operator, OperatorOutcome, Resolution, ResolveError, Resolved, MAX_DETAIL_BYTES,
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
}
