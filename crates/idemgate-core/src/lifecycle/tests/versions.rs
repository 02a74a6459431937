//! A record written by a release that fingerprinted with version 1, and retries whose
//! fingerprint this release computes with version 2.

use super::*;
use crate::fingerprint::{FingerprintInput, FingerprintOptions, CURRENT_VERSION};

fn input(body: &[u8]) -> FingerprintInput<'_> {
    FingerprintInput {
        method: "POST",
        route: "POST /payments",
        path: "/payments",
        query: Some("b=1&a=2"),
        content_type: Some("application/json; charset=utf-8"),
        content_encoding: None,
        headers: &[],
        body,
    }
}

/// Begins `body` as this release does: the current fingerprint, and the request's own
/// fingerprint in the version of a record written by another release.
async fn retry(e: &Lifecycle<Faulty>, k: &ScopedKey, body: &'static [u8]) -> Begin {
    let opts = FingerprintOptions::default();
    let now = Fingerprint::compute(&input(body), &opts).unwrap();
    assert_eq!(now.version, CURRENT_VERSION);
    let refingerprint =
        move |v| async move { Fingerprint::compute_version(v, &input(body), &opts).ok() };
    e.begin(k, now, &RoutePlan::default(), refingerprint).await
}

#[tokio::test(start_paused = true)]
async fn a_version_1_record_and_a_retry_computed_now_are_the_same_request() {
    assert_ne!(CURRENT_VERSION, 1);
    let (e, _) = engine();
    let k = unique_key("alice");
    let opts = FingerprintOptions::default();
    let v1 = Fingerprint::compute_version(1, &input(br#"{"amount":10,"currency":"EUR"}"#), &opts);
    let v1 = v1.unwrap();
    let p = RoutePlan::default();
    let Begin::Run(h) = e.begin(&k, v1, &p, |_| async { None }).await else {
        panic!("the old release ran it")
    };
    e.finish(&h, Outcome::Complete(response(4))).await;

    let same = retry(&e, &k, br#"{ "currency": "EUR", "amount": 10 }"#).await;
    assert!(
        matches!(&same, Begin::Answer(Answer::Replay(r)) if *r == response(4)),
        "{same:?}"
    );
    let other = retry(&e, &k, br#"{"amount":11,"currency":"EUR"}"#).await;
    assert!(
        matches!(other, Begin::Answer(Answer::Mismatch)),
        "{other:?}"
    );
    // the record is untouched by the mismatch
    let again = retry(&e, &k, br#"{"amount":10,"currency":"EUR"}"#).await;
    assert!(
        matches!(again, Begin::Answer(Answer::Replay(_))),
        "{again:?}"
    );
}
