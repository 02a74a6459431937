//! The store conformance suite against [`SqliteStore`] on a fresh temporary file, and once
//! more in memory, and once more with one command per transaction.

mod common;

use common::{damage, TempStore};
use idemgate_sqlite::{SqliteOptions, SqliteStore};

async fn make() -> Option<TempStore> {
    Some(TempStore::open(SqliteOptions::default()))
}

idemgate_core::store_conformance!(make, damage);

mod in_memory {
    use super::*;
    use common::damage_in_memory;

    async fn make() -> Option<SqliteStore> {
        Some(SqliteStore::open_in_memory().expect("open in memory"))
    }

    idemgate_core::store_conformance!(make, damage_in_memory);
    idemgate_core::admin_conformance!(make, damage_in_memory);
}

mod one_command_per_transaction {
    use super::*;

    async fn make() -> Option<TempStore> {
        Some(TempStore::open(SqliteOptions::default().with_max_batch(1)))
    }

    idemgate_core::store_conformance!(make, damage);
}

idemgate_core::admin_conformance!(make, damage);
