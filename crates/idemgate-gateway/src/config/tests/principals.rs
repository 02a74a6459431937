//! The principal settings: JWT sources and per-principal limits.

use super::*;

fn jwt_data(name: &str) -> String {
    format!("{}/tests/data/jwt/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn a_jwt_principal_loads_its_keys_once() {
    let c = Config::from_toml(&format!(
        r#"
        upstream = "http://127.0.0.1:3000"
        [defaults]
        principal = "jwt:sub"
        [[routes]]
        route = "POST /refunds"
        principal = "jwt:tenant_id"
        [jwt]
        hs256_secret_file = "{}"
        jwks_file = "{}"
        issuer = "https://auth.example.com"
        audience = "payments-api"
        leeway = "10s"
        "#,
        jwt_data("hs256.secret"),
        jwt_data("jwks.json")
    ))
    .unwrap();
    let v = c.validate().unwrap();
    let PrincipalSource::Jwt { claim, verifier } = &v.base.policy.default_route().principal else {
        panic!("{:?}", v.base.policy.default_route().principal);
    };
    assert_eq!(claim, "sub");
    let (_, refunds) = v.base.policy.routes().next().unwrap();
    let PrincipalSource::Jwt {
        claim,
        verifier: same,
    } = &refunds.principal
    else {
        panic!("{:?}", refunds.principal);
    };
    assert_eq!(claim, "tenant_id");
    assert!(Arc::ptr_eq(verifier, same), "one verifier, loaded once");
}

#[test]
fn every_jwt_mistake_names_its_field() {
    let errs = |text: &str| {
        let mut t = String::from("upstream = \"http://127.0.0.1:3000\"\n");
        t += text;
        Config::from_toml(&t).unwrap().validate().unwrap_err()
    };
    let has = |errs: &[String], field: &str, needle: &str| {
        assert!(
            errs.iter()
                .any(|e| e.starts_with(field) && e.contains(needle)),
            "{field} / {needle} missing in {errs:#?}"
        )
    };
    let e = errs("[[routes]]\nroute = \"POST /a\"\nprincipal = \"jwt:sub\"\n");
    has(&e, "routes[0].principal:", "[jwt]");
    let e = errs("[defaults]\nprincipal = \"jwt:\"\n[jwt]\njwks_file = \"/nonexistent/jwks.json\"\nleeway = \"soon\"\nissuer = \"\"\n");
    has(&e, "defaults.principal:", "claim name");
    has(&e, "jwt.jwks_file:", "cannot read `/nonexistent/jwks.json`");
    has(&e, "jwt.leeway:", "soon");
    has(&e, "jwt.issuer:", "empty");
    let e = errs("[jwt]\nleeway = \"5s\"\n");
    has(&e, "jwt:", "hs256_secret_file, jwks_file");
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short.secret");
    std::fs::write(&short, "tooshort\n").unwrap();
    let bad_set = dir.path().join("jwks.json");
    std::fs::write(&bad_set, r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}"#).unwrap();
    let e = errs(&format!(
        "[jwt]\nhs256_secret_file = \"{}\"\njwks_file = \"{}\"\n",
        short.display(),
        bad_set.display()
    ));
    has(&e, "jwt.hs256_secret_file:", "8 bytes");
    has(&e, "jwt.jwks_file:", "keys[0]");
    std::fs::write(&bad_set, "not json").unwrap();
    let e = errs(&format!("[jwt]\njwks_file = \"{}\"\n", bad_set.display()));
    has(&e, "jwt.jwks_file:", "not a JWK set");
    let err = Config::from_toml("upstream = \"http://a:1\"\n[jwt]\njwks_fil = \"x\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("`jwt.jwks_fil`"), "{err}");
}

#[test]
fn per_principal_limits_are_off_by_default_and_set_per_route() {
    let c = parse(
        r#"
        upstream = "http://127.0.0.1:3000"
        [defaults]
        max_in_flight_per_principal = 8
        new_keys_per_second_per_principal = 2.5
        [[routes]]
        route = "POST /payments"
        new_keys_per_second_per_principal = 10
        new_keys_burst_per_principal = 40
        [[routes]]
        route = "POST /likes"
        max_in_flight_per_principal = 0
        new_keys_per_second_per_principal = 0
        "#,
    );
    let v = c.validate().unwrap();
    let d = v.base.policy.default_route().limits;
    assert_eq!(d.max_in_flight.map(|n| n.get()), Some(8));
    let rate = d.new_keys.unwrap();
    assert_eq!((rate.per_second(), rate.burst().get()), (2.5, 3));
    let mut routes = v.base.policy.routes();
    let (_, payments) = routes.next().unwrap();
    assert_eq!(payments.limits.max_in_flight.map(|n| n.get()), Some(8));
    let rate = payments.limits.new_keys.unwrap();
    assert_eq!((rate.per_second(), rate.burst().get()), (10.0, 40));
    let (_, likes) = routes.next().unwrap();
    assert!(likes.limits.is_off(), "0 turns inherited limits off");
    let plain = parse("upstream = \"http://127.0.0.1:3000\"\n[[routes]]\nroute = \"POST /a\"\n");
    let v = plain.validate().unwrap();
    assert!(v.base.policy.default_route().limits.is_off());
    assert!(v.base.policy.routes().all(|(_, rp)| rp.limits.is_off()));
}

#[test]
fn bad_limits_name_their_field() {
    let bad = parse(
        r#"
        upstream = "http://127.0.0.1:3000"
        [defaults]
        new_keys_per_second_per_principal = -1
        [[routes]]
        route = "POST /a"
        new_keys_per_second_per_principal = 0
        new_keys_burst_per_principal = 5
        [[routes]]
        route = "POST /b"
        new_keys_per_second_per_principal = 1
        new_keys_burst_per_principal = 2000000
        "#,
    );
    let errs = bad.validate().unwrap_err();
    for field in [
        "defaults.new_keys_per_second_per_principal:",
        "routes[0].new_keys_burst_per_principal:",
        "routes[1].new_keys_burst_per_principal:",
    ] {
        assert!(
            errs.iter().any(|e| e.starts_with(field)),
            "{field} missing in {errs:#?}"
        );
    }
    let err = Config::from_toml(
        "upstream = \"http://a:1\"\n[defaults]\nmax_in_flight_per_principal = -1\n",
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("max_in_flight_per_principal"),
        "{err}"
    );
}

#[test]
fn a_principal_hash_key_file_keys_the_authorization_hash_only() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("principal.key");
    std::fs::write(&key, format!("{}\n", "k".repeat(32))).unwrap();
    let short = dir.path().join("short.key");
    std::fs::write(&short, "too short\n").unwrap();
    let config = |file: &std::path::Path| {
        Config::from_toml(&format!(
            r#"
            upstream = "http://127.0.0.1:3000"
            principal_hash_key_file = "{}"
            [[routes]]
            route = "POST /orders"
            principal = "header:x-user-id"
            "#,
            file.display()
        ))
        .unwrap()
    };
    let v = config(&key).validate().unwrap();
    let default = &v.base.policy.default_route().principal;
    assert!(
        matches!(default, PrincipalSource::AuthorizationHmac(_)),
        "{default:?}"
    );
    let (_, orders) = v.base.policy.routes().next().unwrap();
    assert!(matches!(orders.principal, PrincipalSource::Header(_)));
    let hashed = idemgate_tower::principal_from_authorization(default, "Basic YTpi");
    assert!(hashed.unwrap().unwrap().starts_with("hauth:"));

    let errs = config(&short).validate().unwrap_err();
    assert!(
        errs.iter()
            .any(|e| e.starts_with("principal_hash_key_file:") && e.contains("at least 32")),
        "{errs:?}"
    );
    let errs = config(&dir.path().join("missing")).validate().unwrap_err();
    assert!(errs.iter().any(|e| e.contains("cannot read")), "{errs:?}");
}
