//! Gateway integration tests: the real server on `127.0.0.1:0` in front of a real upstream
//! server that counts executions, and the real `idemgate` binary where a process must die.
//! One test binary, one module per topic.

mod admin;
mod cli;
mod clients;
mod concurrency;
mod config_reference;
mod connections;
mod contract;
/// What `contract.rs` tests against: the support module itself here.
use support as contract_support;
/// The contract tests with the gateway on `idemgate://`, its key service on SQLite.
// `contract.rs` is compiled three times on purpose: once per support module.
#[allow(clippy::duplicate_mod)]
#[path = "."]
mod contract_on_key_service_sqlite {
    use crate::key_service_contract::sqlite as contract_support;
    mod contract;
}
/// The contract tests with the gateway on `idemgate://`, its key service on PostgreSQL.
#[allow(clippy::duplicate_mod)]
#[path = "."]
mod contract_on_key_service_postgres {
    use crate::key_service_contract::postgres as contract_support;
    mod contract;
}
mod demo;
mod differential;
mod docs;
mod drain;
mod failures;
mod faults;
mod fingerprint;
mod first_events;
mod forward_journal;
mod journal_failover;
mod key_lifetime;
mod key_service;
mod key_service_contract;
mod key_service_store;
mod limits;
mod observability;
mod openapi;
mod ops;
mod override_headers;
mod parking;
mod paths;
mod postgres;
mod principal;
mod probe;
mod purge;
mod purge_cli;
mod readme;
mod redis;
mod redis_failover;
mod release_guard;
mod reload;
mod replay;
mod replication;
mod resolve;
mod retry_client;
mod scope;
mod sealed;
mod sealed_logs;
mod sqlite_files;
mod stderr;
mod store_metrics;
mod stored_form;
mod support;
mod tls;
mod upstream;
mod waits;
