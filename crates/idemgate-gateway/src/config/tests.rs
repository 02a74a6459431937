use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::store::StoreUrl;
use http::StatusCode;
use idemgate_core::LeaseExpiredPolicy;
use idemgate_tower::PrincipalSource;

mod compat;
mod journal;
mod principals;
mod replication;

fn parse(text: &str) -> Config {
    toml::from_str(text).unwrap()
}

#[test]
fn example_file_is_the_default() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/gateway.example.toml");
    let file = Config::from_file(&path).unwrap();
    let want = Config {
        upstream: "http://127.0.0.1:3000".into(),
        ..Config::default()
    };
    assert_eq!(file, want);
    file.validate().unwrap();
}

#[test]
fn unknown_keys_are_named() {
    let err =
        toml::from_str::<Config>("upstream = \"http://a:1\"\nlisten_addr = \"x\"").unwrap_err();
    assert!(err.to_string().contains("listen_addr"), "{err}");
    let err = toml::from_str::<Config>("[[routes]]\nroute = \"POST /a\"\nkey_requird = true")
        .unwrap_err();
    assert!(err.to_string().contains("key_requird"), "{err}");
}

#[test]
fn every_unknown_key_is_reported_at_once() {
    let err = Config::from_toml(
        "lisen = \"x\"\nstor = \"y\"\n[defaults]\nfail_opne = true\n[[routes]]\nroute = \"POST /a\"\nkey_requird = true\n",
    )
    .unwrap_err()
    .to_string();
    for key in [
        "`lisen`",
        "`stor`",
        "`defaults.fail_opne`",
        "`routes[0].key_requird`",
    ] {
        assert!(err.contains(key), "{key} in {err}");
    }
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/gateway.example.toml"),
    )
    .unwrap();
    Config::from_toml(&example).unwrap();
}

#[test]
fn lower_case_methods_are_refused() {
    let c = parse(
        "upstream = \"http://a:1\"\nmethods = [\"post\"]\n[[routes]]\nroute = \"post /payments\"\n",
    );
    let errs = c.validate().unwrap_err();
    assert!(
        errs.iter()
            .any(|e| e.starts_with("methods:") && e.contains("did you mean POST?")),
        "{errs:?}"
    );
    assert!(
        errs.iter()
            .any(|e| e.starts_with("routes[0].route:") && e.contains("did you mean POST?")),
        "{errs:?}"
    );
}

#[test]
fn every_error_is_reported_with_its_field() {
    let c = parse(
        r#"
        listen = "nowhere"
        upstream = "ftp://x"
        store = "mysql://x"
        upstream_timeout = "soon"
        [defaults]
        record_ttl = "1 fortnight"
        mismatch_status = 409
        [[routes]]
        route = "POST payments"
        [[routes]]
        route = "POST /refunds"
        release_statuses = ["6xx"]
        principal = "cookie"
        "#,
    );
    let errs = c.validate().unwrap_err();
    for field in [
        "listen:",
        "upstream:",
        "store:",
        "upstream_timeout:",
        "defaults.record_ttl:",
        "defaults.mismatch_status:",
        "routes[0].route:",
        "routes[1].release_statuses:",
        "routes[1].principal:",
    ] {
        assert!(
            errs.iter().any(|e| e.starts_with(field)),
            "{field} missing in {errs:#?}"
        );
    }
}

#[test]
fn routes_inherit_defaults_and_override() {
    let c = parse(
        r#"
        upstream = "http://127.0.0.1:3000"
        store = "memory://"
        [defaults]
        lease_ttl = "2s"
        [[routes]]
        route = "POST /accounts/{id}/refunds"
        key_required = true
        mismatch_status = 400
        principal = "header:x-user-id"
        "#,
    );
    let v = c.validate().unwrap();
    let (route, rp) = v.base.policy.routes().next().unwrap();
    assert_eq!(route, "POST /accounts/{id}/refunds");
    assert!(rp.key_required);
    assert_eq!(rp.lease_ttl, Duration::from_secs(2));
    assert_eq!(rp.mismatch_status, StatusCode::BAD_REQUEST);
    assert_eq!(
        rp.principal,
        PrincipalSource::Header(HeaderName::from_static("x-user-id"))
    );
    assert_eq!(rp.record_ttl, Duration::from_secs(86400));
    assert!(!v.base.policy.default_route().key_required);
    assert_eq!(v.base.store, StoreUrl::Memory);
}

#[test]
fn a_lapsed_lease_means_outcome_unknown_unless_a_route_says_otherwise() {
    let c = parse(
        "upstream = \"http://127.0.0.1:3000\"\nstore_timeout = \"500ms\"\nmax_pending_outcomes = 8\n\
         [[routes]]\nroute = \"POST /likes\"\nlease_expired = \"takeover\"\n",
    );
    let v = c.validate().unwrap();
    assert_eq!(
        v.base.policy.default_route().lease_expired,
        LeaseExpiredPolicy::Unknown
    );
    let (_, likes) = v.base.policy.routes().next().unwrap();
    assert_eq!(likes.lease_expired, LeaseExpiredPolicy::Takeover);
    assert_eq!(
        v.base.policy.lifecycle.store_timeout,
        std::time::Duration::from_millis(500)
    );
    assert_eq!(v.base.policy.lifecycle.max_pending_outcomes, 8);

    let bad = parse(
        "upstream = \"http://127.0.0.1:3000\"\nstore_timeout = \"soon\"\nmax_pending_outcomes = 0\n\
         [defaults]\nlease_expired = \"retry\"\n",
    );
    let errs = bad.validate().unwrap_err();
    for field in [
        "store_timeout",
        "max_pending_outcomes",
        "defaults.lease_expired",
    ] {
        assert!(
            errs.iter().any(|e| e.starts_with(field)),
            "{field} missing in {errs:#?}"
        );
    }
}

#[test]
fn the_decoded_body_limit_follows_each_routes_body_limit_unless_set() {
    let c = parse(
        "upstream = \"http://127.0.0.1:3000\"\n[defaults]\nmax_body_bytes = 1000\n\
         [[routes]]\nroute = \"POST /a\"\nmax_decoded_body_bytes = 1500\n\
         [[routes]]\nroute = \"POST /b\"\nmax_body_bytes = 300\n",
    );
    let v = c.validate().unwrap();
    assert_eq!(v.base.policy.default_route().decoded_body_limit(), 4000);
    let limits: Vec<_> = v
        .base
        .policy
        .routes()
        .map(|(r, p)| (r.to_owned(), p.decoded_body_limit()))
        .collect();
    assert!(limits.contains(&("POST /a".into(), 1500)), "{limits:?}");
    assert!(limits.contains(&("POST /b".into(), 1200)), "{limits:?}");
    let bad = parse(
        "upstream = \"http://127.0.0.1:3000\"\n[[routes]]\nroute = \"POST /a\"\nmax_decoded_body_bytes = 0\n",
    );
    let errs = bad.validate().unwrap_err();
    assert!(
        errs.iter()
            .any(|e| e.starts_with("routes[0].max_decoded_body_bytes:")),
        "{errs:?}"
    );
}

#[test]
fn route_templates_the_router_would_not_match_are_refused_with_the_right_spelling() {
    let c = parse(
        r#"
        upstream = "http://127.0.0.1:3000"
        [[routes]]
        route = "POST /accounts/:id/refunds"
        [[routes]]
        route = "POST /files/*rest"
        [[routes]]
        route = "POST /orders/{id"
        [[routes]]
        route = "POST /payments"
        [[routes]]
        route = "POST  /payments"
        [[routes]]
        route = "POST /carts/{id}/items"
        [[routes]]
        route = "POST /carts/{cart}/items"
        "#,
    );
    let errs = c.validate().unwrap_err();
    for (field, hint) in [
        ("routes[0].route:", "`{id}`"),
        ("routes[1].route:", "`{*rest}`"),
        ("routes[2].route:", "unbalanced braces"),
        ("routes[4].route:", "is already routes[3].route"),
        (
            "routes[6].route:",
            "conflicts with `POST /carts/{id}/items`",
        ),
    ] {
        assert!(
            errs.iter()
                .any(|e| e.starts_with(field) && e.contains(hint)),
            "{field} {hint} missing in {errs:#?}"
        );
    }
    assert_eq!(errs.len(), 5, "{errs:#?}");
    assert!(
        errs.iter().all(|e| !e.contains("Insertion failed")),
        "our words, not the router's: {errs:#?}"
    );
    let ok = parse(
        "upstream = \"http://127.0.0.1:3000\"\n[[routes]]\nroute = \"POST /files/{*path}\"\n\
         [[routes]]\nroute = \"POST /v{version}/payments\"\n",
    );
    ok.validate().unwrap();
}

#[test]
fn response_limits_are_checked() {
    let v = parse("upstream = \"http://127.0.0.1:3000\"\nmax_response_headers = 1000\n")
        .validate()
        .unwrap();
    assert_eq!(v.max_response_headers, 1000);
    let default = parse("upstream = \"http://127.0.0.1:3000\"\n")
        .validate()
        .unwrap();
    assert_eq!(default.max_response_headers, 256);
    for n in [0, MAX_RESPONSE_HEADERS_LIMIT + 1] {
        let errs = parse(&format!(
            "upstream = \"http://127.0.0.1:3000\"\nmax_response_headers = {n}\n"
        ))
        .validate()
        .unwrap_err();
        assert!(
            errs.iter().any(|e| e.starts_with("max_response_headers:")),
            "{errs:#?}"
        );
    }
    let errs = parse(
        "upstream = \"http://127.0.0.1:3000\"\n[[routes]]\nroute = \"POST /exports\"\n\
         max_stored_response_bytes = 1073741824\n",
    )
    .validate()
    .unwrap_err();
    assert!(
        errs.iter()
            .any(|e| e.starts_with("routes[0].max_stored_response_bytes:")),
        "{errs:#?}"
    );
}

#[test]
fn an_in_memory_sqlite_store_is_refused() {
    for url in ["sqlite::memory:", "sqlite://:memory:"] {
        let errs = parse(&format!(
            "upstream = \"http://127.0.0.1:3000\"\nstore = \"{url}\"\n"
        ))
        .validate()
        .unwrap_err();
        assert!(
            errs.iter()
                .any(|e| e.starts_with("store:") && e.contains("memory://")),
            "{url}: {errs:#?}"
        );
    }
}

#[test]
fn a_status_an_earlier_list_already_matches_is_refused() {
    // 503 is released by the default `release_statuses` before `fail_statuses` is read.
    let errs = parse(
        "upstream = \"http://127.0.0.1:3000\"\n[[routes]]\nroute = \"POST /charges\"\n\
         fail_statuses = [\"5xx\", \"503\"]\n",
    )
    .validate()
    .unwrap_err();
    assert!(
        errs.iter()
            .any(|e| e.starts_with("routes[0].fail_statuses:")
                && e.contains("`503`")
                && e.contains("release_statuses")),
        "{errs:#?}"
    );
    let ok = "upstream = \"http://127.0.0.1:3000\"\n[[routes]]\nroute = \"POST /charges\"\n\
              release_statuses = [\"408\", \"425\", \"429\"]\n";
    assert!(parse(ok).validate().is_ok());
}

#[test]
fn every_bad_entry_of_a_list_is_named() {
    let errs = parse(
        "upstream = \"http://127.0.0.1:3000\"\n[defaults]\n\
         store_statuses = [\"2xx\", \"600\", \"abc\", \"4XX\"]\n",
    )
    .validate()
    .unwrap_err();
    let line = errs
        .iter()
        .find(|e| e.starts_with("defaults.store_statuses:"))
        .unwrap_or_else(|| panic!("{errs:#?}"));
    assert!(line.contains("`600`") && line.contains("`abc`"), "{line}");
}

#[test]
fn in_flight_retry_after_is_bounded() {
    for bad in ["0s", "500ms", "2h"] {
        let errs = parse(&format!(
            "upstream = \"http://127.0.0.1:3000\"\n[defaults]\nin_flight_retry_after = \"{bad}\"\n"
        ))
        .validate()
        .unwrap_err();
        assert!(
            errs.iter()
                .any(|e| e.starts_with("defaults.in_flight_retry_after:")),
            "{bad}: {errs:#?}"
        );
    }
    let ok = "upstream = \"http://127.0.0.1:3000\"\n[defaults]\nin_flight_retry_after = \"30s\"\n";
    assert!(parse(ok).validate().is_ok());
}

#[test]
fn redaction_needs_pointers_and_pointers_need_redaction() {
    let up = "upstream = \"http://127.0.0.1:3000\"\n";
    for (text, want) in [
        (
            "[defaults]\nstore_response = \"redacted\"\n",
            "defaults.redact_json_pointers: store_response = \"redacted\" names no value",
        ),
        (
            "[defaults]\nredact_json_pointers = [\"/card\"]\n",
            "defaults.redact_json_pointers: redacts nothing unless",
        ),
        (
            "[defaults]\nstore_response = \"redacted\"\nredact_json_pointers = [\"card\"]\n",
            "`card` is not a JSON Pointer",
        ),
        (
            "[defaults]\nstore_response = \"secret\"\n",
            "store_response",
        ),
        (
            "[defaults]\nstore_response = \"redacted\"\nredact_json_pointers = [\"/a~2b\"]\n",
            "`~` is written only as `~0`",
        ),
        (
            "[defaults]\nstore_response = \"redacted\"\nredact_json_pointers = [\"/a~\"]\n",
            "`~` is written only as `~0`",
        ),
        (
            "[defaults]\nstore_response = \"redacted\"\nredact_json_pointers = [\"\"]\n",
            "names the whole body",
        ),
        (
            "[defaults]\nignore_json_pointers = [\"/x~3\"]\n",
            "`~` is written only as `~0`",
        ),
    ] {
        let errs = match toml::from_str::<Config>(&format!("{up}{text}")) {
            Ok(c) => c.validate().unwrap_err(),
            Err(e) => vec![e.to_string()],
        };
        assert!(errs.iter().any(|e| e.contains(want)), "{text}: {errs:#?}");
        if text.contains("[\"") || text.contains("secret") {
            assert_eq!(errs.len(), 1, "one problem, one error: {errs:#?}");
        }
    }
    for ok in [
        "[defaults]\nstore_response = \"redacted\"\nredact_json_pointers = [\"/card/number\", \"/keys/*/secret\"]\n",
        "[defaults]\nstore_response = \"status-only\"\n",
        "[defaults]\nstore_response = \"redacted\"\nredact_json_pointers = [\"/a\"]\n[[routes]]\nroute = \"POST /b\"\nstore_response = \"status-only\"\n",
    ] {
        assert!(parse(&format!("{up}{ok}")).validate().is_ok(), "{ok}");
    }
}

#[test]
fn a_wait_past_the_upstream_timeout_is_refused() {
    let text = "upstream = \"http://a:1\"\nupstream_timeout = \"5s\"\n[defaults]\non_in_flight = \"wait\"\nmax_wait = \"6s\"\n";
    let errs = parse(text).validate().unwrap_err();
    assert!(
        errs.iter()
            .any(|e| e.starts_with("max_wait: 6s on [defaults] is above upstream_timeout (5s)")),
        "{errs:?}"
    );
    // The same wait on a route that answers 409 waits for nothing: accepted.
    parse(&text.replace("\"wait\"", "\"conflict\""))
        .validate()
        .unwrap();
    parse(&text.replace("6s", "5s")).validate().unwrap();
    for short in ["0s", "1ns", "99ms"] {
        let errs = parse(&text.replace("6s", short)).validate().unwrap_err();
        assert!(
            errs.iter()
                .any(|e| e.starts_with("max_wait: ") && e.contains("below 100ms")),
            "{short}: {errs:?}"
        );
    }
    let unknown = text.replace("\"wait\"", "\"sleep\"");
    let named = match toml::from_str::<Config>(&unknown) {
        Err(e) => e.to_string(),
        Ok(c) => c.validate().unwrap_err().join("\n"),
    };
    assert!(named.contains("on_in_flight"), "{named}");
}

#[test]
fn max_waiters_is_bounded() {
    for (n, ok) in [(0, false), (1, true), (1_000_000, true), (1_000_001, false)] {
        let c = parse(&format!("upstream = \"http://a:1\"\nmax_waiters = {n}\n"));
        assert_eq!(c.validate().is_ok(), ok, "{n}");
    }
}
