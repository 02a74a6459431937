//! The store conformance suite against [`MemoryStore`].

use idemgate_core::testing::damage_memory;
use idemgate_core::MemoryStore;

async fn make() -> Option<MemoryStore> {
    Some(MemoryStore::new())
}

idemgate_core::store_conformance!(make, damage_memory);
idemgate_core::admin_conformance!(make, damage_memory);
