//! The gateway's configuration (`idemgate_gateway::config`): TOML text to `Config`, then
//! `Config::validate`.
//!
//! Properties: no panic on any text; parsing and validation are deterministic; every
//! validation error names its field (`field: problem`, a top-level key, `defaults.KEY` or
//! `routes[N].KEY`), so a bad file is never reported without saying where.
#![no_main]

use idemgate_gateway::config::Config;
use libfuzzer_sys::fuzz_target;

/// The first field name of every message `Config::validate` may write.
const FIELDS: &[&str] = &[
    "listen",
    "admin_listen",
    "upstream",
    "store",
    "store_timeout",
    "max_pending_outcomes",
    "max_pending_outcome_bytes",
    "upstream_timeout",
    "header_name",
    "methods",
    "key_min_length/key_max_length",
    "problem_type_base",
    "purge_interval",
    "purge_batch",
];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = Config::from_toml(text) else {
        return;
    };
    assert_eq!(Config::from_toml(text).ok().as_ref(), Some(&config));
    let errs = match config.validate() {
        Ok(_) => return,
        Err(errs) => errs,
    };
    assert!(!errs.is_empty(), "a refused config says why");
    assert_eq!(config.validate().err().as_ref(), Some(&errs));
    for e in &errs {
        let (field, problem) = e
            .split_once(": ")
            .unwrap_or_else(|| panic!("no field: {e}"));
        assert!(!problem.is_empty(), "no problem: {e}");
        let known = FIELDS.contains(&field)
            || field.strip_prefix("defaults").is_some_and(route_field)
            || field
                .strip_prefix("routes[")
                .and_then(|r| r.split_once(']'))
                .is_some_and(|(i, rest)| i.parse::<usize>().is_ok() && route_field(rest));
        assert!(known, "error without a known field: {e}");
    }
});

/// `.KEY` for a key of a route table.
fn route_field(rest: &str) -> bool {
    rest.strip_prefix('.')
        .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b == b'_' || b.is_ascii_lowercase()))
}
