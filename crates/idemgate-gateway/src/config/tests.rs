use super::*;

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
    let (route, rp) = v.policy.routes().next().unwrap();
    assert_eq!(route, "POST /accounts/{id}/refunds");
    assert!(rp.key_required);
    assert_eq!(rp.lease_ttl, Duration::from_secs(2));
    assert_eq!(rp.mismatch_status, StatusCode::BAD_REQUEST);
    assert_eq!(
        rp.principal,
        PrincipalSource::Header(HeaderName::from_static("x-user-id"))
    );
    assert_eq!(rp.record_ttl, Duration::from_secs(86400));
    assert!(!v.policy.default_route().key_required);
    assert_eq!(v.store, StoreUrl::Memory);
}
