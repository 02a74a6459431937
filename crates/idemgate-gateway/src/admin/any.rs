//! [`AdminStore`] for [`AnyStore`]: the operator operations of the backend chosen at run
//! time. The memory store is refused: its records live inside one gateway process.

use idemgate_core::admin::{AdminStats, AdminStore, KeyFilter, Listing};
use idemgate_core::{RawRecord, StoreError};

use crate::store::AnyStore;

/// Runs `$e` with `$s` bound to the persistent backend; the memory store is refused.
macro_rules! persistent {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            AnyStore::Sqlite($s) => $e,
            AnyStore::Postgres($s) => $e,
            AnyStore::Redis($s) => $e,
            AnyStore::Memory(_) => Err(StoreError::Backend(MEMORY.into())),
            AnyStore::KeyService(_) => Err(StoreError::Backend(KEY_SERVICE.into())),
        }
    };
}

/// Why `memory://` cannot be inspected from outside.
pub(crate) const MEMORY: &str = "memory:// keeps its records inside one running gateway: \
     inspect, release, resolve and stats need the gateway's persistent store (sqlite://, postgres://, redis://)";

/// Why `idemgate://` cannot be inspected from a gateway.
pub(crate) const KEY_SERVICE: &str = "idemgate:// records live in the key service: read them with \
     GET /v1/records there, or run inspect, release, resolve and stats against the key service's own store";

impl AdminStore for AnyStore {
    async fn list_key(&self, filter: &KeyFilter) -> Result<Listing, StoreError> {
        persistent!(self, s => s.list_key(filter).await)
    }

    async fn delete_exact(&self, seen: &RawRecord) -> Result<bool, StoreError> {
        persistent!(self, s => s.delete_exact(seen).await)
    }

    async fn admin_stats(&self) -> Result<AdminStats, StoreError> {
        persistent!(self, s => s.admin_stats().await)
    }
}
