//! The window of an attempt that may still be running at the upstream, by record state.

use idemgate_core::admin::Listing;
use idemgate_core::testing::{fp, unique_key};
use idemgate_core::{LeaseToken, RawRecord, RecordState};

use super::{Limits, Running, MARGIN};
use crate::config::Config;

const T0: i64 = 1_700_000_000_000;

/// Limits of a configuration with `upstream_timeout = 30s` and, on `POST /payments`,
/// `max_lease = 20s`.
fn limits() -> Limits {
    let toml = "upstream = \"http://127.0.0.1:1\"\nupstream_timeout = \"30s\"\n\
                [[routes]]\nroute = \"POST /payments\"\nmax_lease = \"20s\"\n";
    let config = Config::from_toml(toml).unwrap().admin_view().unwrap();
    Limits::new(&config, true)
}

/// A record created at `T0` under a 10 s lease, living a day.
fn stuck() -> RawRecord {
    let key = unique_key("alice");
    let day = 86_400_000;
    RawRecord::in_progress(
        &key,
        fp(1),
        1,
        LeaseToken::random(),
        T0 + 10_000,
        T0,
        T0 + day,
    )
}

fn end(after_start: i64) -> i64 {
    after_start + 30_000 + MARGIN.as_millis() as i64
}

#[test]
fn in_progress_runs_until_its_lease_plus_the_upstream_timeout() {
    let (l, raw) = (limits(), stuck());
    let until = end(T0 + 10_000);
    assert_eq!(l.running(&raw, T0 + 12_000), Running::Until(until));
    assert_eq!(l.running(&raw, until - 1), Running::Until(until));
    assert_eq!(l.running(&raw, until), Running::No);
}

#[test]
fn a_taken_over_record_counts_from_its_new_lease() {
    let mut raw = stuck();
    raw.fence = Some(2);
    raw.lease_expires_at = Some(T0 + 600_000); // taken over ten minutes later
    let until = end(T0 + 600_000);
    assert_eq!(limits().running(&raw, T0 + 100_000), Running::Until(until));
}

#[test]
fn an_unreadable_lease_counts_until_created_plus_the_routes_max_lease() {
    let mut raw = stuck();
    raw.lease_expires_at = None;
    assert_eq!(limits().running(&raw, T0), Running::Until(end(T0 + 20_000)));
    raw.created_at = None;
    assert_eq!(limits().running(&raw, T0), Running::Unknown);
}

#[test]
fn failed_counts_from_its_failure_and_completed_or_expired_not_at_all() {
    let l = limits();
    let mut failed = stuck();
    failed.set_outcome(RecordState::Failed, None, T0 + 30_000);
    assert_eq!(
        l.running(&failed, T0 + 31_000),
        Running::Until(end(T0 + 30_000))
    );
    let mut done = stuck();
    done.set_outcome(
        RecordState::Completed,
        Some(&idemgate_core::testing::response(3)),
        T0 + 1,
    );
    assert_eq!(l.running(&done, T0 + 2), Running::No);
    let mut expired = stuck();
    expired.expires_at = Some(T0 + 11_000);
    assert_eq!(l.running(&expired, T0 + 12_000), Running::No);
}

#[test]
fn the_refusal_names_the_record_and_when_it_becomes_releasable() {
    let l = limits();
    let raw = stuck();
    let listing = |now| Listing {
        now,
        records: vec![raw.clone()],
    };
    let why = l
        .refuse_running(&listing(T0 + 12_000))
        .unwrap_err()
        .to_string();
    assert!(
        why.contains("POST /payments alice (in_progress): may still be running until"),
        "{why}"
    );
    assert!(
        why.contains("Releasable from 2023-11-14T22:14:05.000Z"),
        "{why}"
    );
    assert!(
        why.contains("upstream_timeout (30s, from --config)"),
        "{why}"
    );
    assert!(
        why.contains("--upstream-stopped") && why.contains("Nothing was released"),
        "{why}"
    );
    assert!(l.refuse_running(&listing(end(T0 + 10_000))).is_ok());
}
