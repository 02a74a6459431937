//! [`idemgate_postgres::PostgresStore`] against a real primary and streaming standby
//! (`scripts/cluster/postgres.sh`, built from this machine's PostgreSQL binaries): the
//! durability report and `require_synchronous_replication`. Each test starts a cluster of
//! its own (about 2 s) and stops it when it ends, passed or failed. Without the binaries
//! under `/usr/lib/postgresql/*/bin`, the tests fail saying so. One binary, one module per
//! topic.

#[path = "../common/mod.rs"]
mod common;

mod cancel;
mod cluster;
mod cost;
mod durability;
mod emptied;
mod require;
mod stall;
