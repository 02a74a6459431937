use super::*;

#[test]
fn routes_resolve_by_template() {
    let p = Policy::default()
        .with_route(
            "POST /accounts/{id}/refunds",
            RoutePolicy {
                key_required: true,
                ..Default::default()
            },
        )
        .unwrap();
    let r = p
        .resolve(&Method::POST, "/accounts/42/refunds")
        .unwrap()
        .unwrap();
    assert_eq!(r.route, "POST /accounts/{id}/refunds");
    assert!(r.policy.key_required);
    let r = p.resolve(&Method::POST, "/payments").unwrap().unwrap();
    assert_eq!(r.route, "POST /payments");
    assert!(!r.policy.key_required);
    assert!(p.resolve(&Method::GET, "/payments").is_none());
    assert!(p.resolve(&Method::PUT, "/accounts/1/refunds").is_none());
    assert!(Policy::default()
        .with_route("POST payments", RoutePolicy::default())
        .is_err());
    assert!(Policy::default()
        .with_route("/payments", RoutePolicy::default())
        .is_err());
    let err = Policy::default()
        .with_route("post /payments", RoutePolicy::default())
        .unwrap_err();
    assert!(err.to_string().contains("did you mean POST?"), "{err}");
    assert_eq!(parse_method("PURGE").unwrap().as_str(), "PURGE");
}

#[test]
fn status_actions() {
    let p = RoutePolicy::default();
    for (s, want) in [
        (200, StatusAction::Store),
        (201, StatusAction::Store),
        (302, StatusAction::Store),
        (304, StatusAction::Store),
        (400, StatusAction::Store),
        (404, StatusAction::Store),
        (408, StatusAction::Release),
        (425, StatusAction::Release),
        (429, StatusAction::Release),
        (500, StatusAction::Fail),
        (502, StatusAction::Fail),
        (503, StatusAction::Release),
        (504, StatusAction::Fail),
    ] {
        let none = http::HeaderMap::new();
        assert_eq!(
            p.action_for(StatusCode::from_u16(s).unwrap(), &none),
            want,
            "{s}"
        );
    }
    // A 401 with an authentication challenge is released; with an empty one it is not.
    let mut challenge = http::HeaderMap::new();
    challenge.insert(http::header::WWW_AUTHENTICATE, "Bearer".parse().unwrap());
    assert_eq!(
        p.action_for(StatusCode::UNAUTHORIZED, &challenge),
        StatusAction::Release
    );
    challenge.insert(http::header::WWW_AUTHENTICATE, " ".parse().unwrap());
    assert_eq!(
        p.action_for(StatusCode::UNAUTHORIZED, &challenge),
        StatusAction::Store
    );
    assert_eq!(StatusPattern::parse("5xx"), Ok(StatusPattern::Class(5)));
    assert_eq!(StatusPattern::parse("418"), Ok(StatusPattern::Exact(418)));
    assert!(StatusPattern::parse("6xx").is_err());
    assert!(StatusPattern::parse("99").is_err());
}

/// Found by the `config` fuzz target: a three-byte value whose first character is two
/// bytes long (`"҇x"`, `"éx"`) made the class check slice inside it and panic.
#[test]
fn status_patterns_with_multibyte_characters_are_refused() {
    for s in ["҇x", "éx", "xé", "€", "5é", "５xx", "ＸＸ"] {
        let err = StatusPattern::parse(s).unwrap_err();
        assert!(err.contains(s), "{err}");
    }
    assert_eq!(StatusPattern::parse(" 4XX "), Ok(StatusPattern::Class(4)));
}

/// Found by the `config` fuzz target: matchit panics on a template with more than 25
/// parameters, so a config file could crash the gateway instead of naming the route.
#[test]
fn routes_with_too_many_parameters_are_refused() {
    let template = |n: usize| {
        let params: String = (0..n).map(|i| format!("/{{p{i}}}")).collect();
        format!("POST /x{params}")
    };
    let add = |route: &str| Policy::default().with_route(route, RoutePolicy::default());
    assert!(add(&template(MAX_ROUTE_PARAMS)).is_ok());
    for n in [MAX_ROUTE_PARAMS + 1, 26, 40] {
        let err = add(&template(n)).unwrap_err().to_string();
        assert!(err.contains("more than 16 parameters"), "{err}");
    }
    // Escaped braces are not parameters (and not in normal form: requests spell them
    // `%7B`, `%7D`).
    let escaped = format!("{}/{}", template(MAX_ROUTE_PARAMS), "{{x}}".repeat(20));
    let err = add(&escaped).unwrap_err().to_string();
    assert!(
        !err.contains("parameters") && err.contains("%7Bx%7D"),
        "{err}"
    );
}

#[test]
fn with_principal_reaches_routes_added_before_and_after_it() {
    let user = PrincipalSource::Header(HeaderName::from_static("x-user-id"));
    let own = PrincipalSource::Header(HeaderName::from_static("x-tenant"));
    let p = Policy::default()
        .with_route("POST /before", RoutePolicy::default())
        .unwrap()
        .with_principal(user.clone())
        .with_route("POST /after", RoutePolicy::default())
        .unwrap()
        .with_route(
            "POST /own",
            RoutePolicy {
                principal: own.clone(),
                ..Default::default()
            },
        )
        .unwrap();
    let of = |route: &str| {
        p.routes()
            .find(|(r, _)| *r == route)
            .map(|(_, rp)| rp.principal.clone())
    };
    assert_eq!(p.default_route().principal, user);
    assert_eq!(of("POST /before"), Some(user.clone()));
    assert_eq!(of("POST /after"), Some(user));
    assert_eq!(of("POST /own"), Some(own), "a route's own source stays");
}
