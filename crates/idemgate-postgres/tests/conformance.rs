//! The store conformance suite against [`PostgresStore`], gated on
//! `IDEMGATE_TEST_DATABASE_URL`.
//!
//! Every case gets a table of its own (`idem_test_<unix secs>_<random>`), as each memory-store
//! case gets a fresh store: the purge cases count every expired row of their table. The
//! cases cannot drop their tables (the suite owns the store), so later runs drop test tables
//! older than an hour.

use idemgate_postgres::PostgresStore;

mod common;

async fn make() -> Option<PostgresStore> {
    common::fresh_store().await
}

idemgate_core::store_conformance!(make);
