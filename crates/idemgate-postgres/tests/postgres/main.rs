//! PostgreSQL-specific tests of [`idemgate_postgres::PostgresStore`], gated on
//! `IDEMGATE_TEST_DATABASE_URL` (unset: each case prints why and passes as skipped). One
//! binary, one module per topic.

#[path = "../common/mod.rs"]
mod common;

mod bloat;
mod errors;
mod migrate;
mod no_rules;
mod purge;
mod timeout;
mod transaction;
mod upgrade;

use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(86_400);
