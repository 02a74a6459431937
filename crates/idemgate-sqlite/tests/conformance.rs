//! The store conformance suite against [`SqliteStore`] on a fresh temporary file, and once
//! more in memory.

mod common;

use common::TempStore;
use idemgate_sqlite::{SqliteOptions, SqliteStore};

async fn make() -> Option<TempStore> {
    Some(TempStore::open(SqliteOptions::default()))
}

idemgate_core::store_conformance!(make);

mod in_memory {
    use super::*;

    async fn make() -> Option<SqliteStore> {
        Some(SqliteStore::open_in_memory().expect("open in memory"))
    }

    idemgate_core::store_conformance!(make);
}

mod one_command_per_transaction {
    use super::*;

    async fn make() -> Option<TempStore> {
        Some(TempStore::open(SqliteOptions::default().with_max_batch(1)))
    }

    idemgate_core::store_conformance!(make);
}
