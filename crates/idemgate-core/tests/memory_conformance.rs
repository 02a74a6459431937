//! The store conformance suite against [`MemoryStore`].

use idemgate_core::MemoryStore;

async fn make() -> Option<MemoryStore> {
    Some(MemoryStore::new())
}

idemgate_core::store_conformance!(make);
