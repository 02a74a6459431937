use std::time::Duration;

use super::*;
use crate::policy::StatusPattern;

#[test]
fn routes_overlay_the_defaults_which_overlay_the_built_in_ones() {
    let p = Policy::from_toml(
        "[defaults]\nlease_ttl = \"2s\"\nmax_body_bytes = 1000\nprincipal = \"header:x-user\"\n\
         [[routes]]\nroute = \"POST /a\"\nrecord_ttl = \"1h\"\nstore_statuses = [\"2xx\"]\n\
         max_in_flight_per_principal = 3\n",
    )
    .unwrap();
    let d = p.default_route();
    assert_eq!(
        (d.lease_ttl, d.decoded_body_limit()),
        (Duration::from_secs(2), 4000)
    );
    let (_, a) = p.routes().next().unwrap();
    assert_eq!(a.record_ttl, Duration::from_secs(3600));
    assert_eq!(a.lease_ttl, Duration::from_secs(2));
    assert_eq!(a.store_statuses, [StatusPattern::Class(2)]);
    assert_eq!(a.principal, d.principal);
    assert_eq!(a.limits.max_in_flight.map(|n| n.get()), Some(3));
    assert_eq!(a.max_lease, RoutePolicy::default().max_lease);
}

#[test]
fn every_problem_is_named_at_once() {
    let errs = Policy::from_toml(
        "[defaults]\nlease_ttl = \"forever\"\nmismatch_status = 418\nkey_requird = true\n\
         [[routes]]\nroute = \"POST /a\"\nfail_open = \"yes\"\nprincipal = \"jwt:sub\"\n\
         [[routes]]\nrelease_statuses = [\"6xx\"]\n",
    )
    .unwrap_err();
    for field in [
        "defaults.lease_ttl: `forever` is not a duration",
        "defaults.mismatch_status: 418 is not 422 or 400",
        "defaults.key_requird: unknown key",
        "routes[0].fail_open: invalid type",
        "routes[0].principal: `jwt:sub` needs a JWT verifier",
        "routes[1].release_statuses: `6xx` is not a status code",
        "routes[1].route: missing",
    ] {
        assert!(
            errs.iter().any(|e| e.starts_with(field)),
            "{field} in {errs:#?}"
        );
    }
}

#[test]
fn keys_are_sorted_into_unknown_mistyped_and_bad_values() {
    let table: toml::Table =
        "lease_tll = \"1s\"\nmax_body_bytes = -1\nlease_expired = \"retry\"\nretry_failed = true\n"
            .parse()
            .unwrap();
    let problems = RouteEntry::key_problems(&table);
    let kinds: Vec<(&str, &str)> = problems
        .iter()
        .map(|(k, p)| {
            let kind = match p {
                KeyProblem::Unknown => "unknown",
                KeyProblem::Type(_) => "type",
                KeyProblem::Value(_) => "value",
            };
            (k.as_str(), kind)
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("lease_expired", "value"),
            ("lease_tll", "unknown"),
            ("max_body_bytes", "type")
        ]
    );
}
