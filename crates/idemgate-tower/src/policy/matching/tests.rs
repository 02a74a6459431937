use http::Method;

use crate::path::{EncodedSlash, ForwardPath, PathAmbiguity, TrailingSlash, Unmatched};
use crate::policy::{Policy, RoutePolicy};
use crate::rejection::IdempotencyRejection;

fn charges(route: RoutePolicy) -> Policy {
    Policy::default()
        .with_route("POST /charges", route)
        .unwrap()
        .with_route("POST /accounts/{id}/refunds", RoutePolicy::default())
        .unwrap()
}

/// The scope route of `path`, or the anchor of the refusal.
fn scope(p: &Policy, path: &str) -> Result<String, &'static str> {
    match p.resolve(&Method::POST, path).expect("POST is covered") {
        Ok(r) => Ok(r.route.into_owned()),
        Err(refused) => Err(refused.anchor()),
    }
}

/// The scope route the releases before normalisation gave `path` under [`charges`]: the
/// template matched as sent, or `POST` and the path exactly as sent.
fn scope_before_normalisation(path: &str) -> String {
    let mut router = matchit::Router::new();
    router.insert("/charges", "POST /charges").unwrap();
    let refunds = "POST /accounts/{id}/refunds";
    router.insert("/accounts/{id}/refunds", refunds).unwrap();
    router
        .at(path)
        .map(|m| (*m.value).to_owned())
        .unwrap_or_else(|_| format!("POST {path}"))
}

mod spellings;

#[test]
fn a_path_in_normal_form_keeps_the_scope_it_had_before() {
    let p = charges(RoutePolicy::default());
    for path in [
        "/charges",
        "/accounts/42/refunds",
        "/accounts/a%20b/refunds",
        "/accounts/%C3%A9/refunds",
        "/payments",
        "/Payments/ABC",
        "/caf%C3%A9",
        "/v1/things:batchCreate",
        "/a.b/c-d_e~f",
        "/a%25b",
        "/",
    ] {
        let before = scope_before_normalisation(path);
        assert_eq!(scope(&p, path), Ok(before), "{path}");
    }
}

#[test]
fn spellings_of_one_path_reach_one_scope_or_are_refused() {
    let p = charges(RoutePolicy {
        key_required: true,
        ..RoutePolicy::default()
    });
    for same in ["/charges", "/%63harges", "/%63%68%61rges", "/ch%61rges"] {
        let r = p.resolve(&Method::POST, same).unwrap().unwrap();
        assert_eq!(r.route, "POST /charges", "{same}");
        assert!(r.policy.key_required, "{same}: key_required applies");
    }
    for refused in [
        "//charges",
        "/./charges",
        "/a/../charges",
        "/%2E/charges",
        "/charges;x=1",
        "/charges/",
        "/charges%2F",
        "/charges%5C",
        "/charges%00",
        "/charges\\",
    ] {
        assert_eq!(scope(&p, refused), Err("ambiguous-path"), "{refused}");
    }
    // Letter case is another path unless the route folds it.
    assert_eq!(scope(&p, "/Charges"), Ok("POST /Charges".into()));
    assert!(
        p.resolve(&Method::GET, "//charges").is_none(),
        "GET not covered"
    );
}

#[test]
fn trailing_slash_same_matches_the_route_and_refuse_refuses_either_way() {
    let same = charges(RoutePolicy {
        trailing_slash: TrailingSlash::Same,
        ..RoutePolicy::default()
    });
    assert_eq!(scope(&same, "/charges/"), Ok("POST /charges".into()));
    assert_eq!(scope(&same, "/%63harges/"), Ok("POST /charges".into()));
    let slashed = Policy::default()
        .with_route("POST /charges/", RoutePolicy::default())
        .unwrap();
    assert_eq!(scope(&slashed, "/charges/"), Ok("POST /charges/".into()));
    assert_eq!(scope(&slashed, "/charges"), Err("ambiguous-path"));
    let default = Policy::default();
    let refused = default.resolve(&Method::POST, "/charges/");
    assert_eq!(
        refused.unwrap().unwrap_err(),
        IdempotencyRejection::AmbiguousPath(PathAmbiguity::TrailingSlash),
        "an unmatched trailing slash under the default route's refuse"
    );
    let default_same = Policy::default().with_default_route(RoutePolicy {
        trailing_slash: TrailingSlash::Same,
        ..RoutePolicy::default()
    });
    assert_eq!(scope(&default_same, "/foo/"), Ok("POST /foo".into()));
    assert_eq!(scope(&default_same, "/"), Ok("POST /".into()));
}

#[test]
fn case_insensitive_routes_fold_case_for_matching_and_scope() {
    let p = charges(RoutePolicy {
        case_insensitive: true,
        trailing_slash: TrailingSlash::Same,
        ..RoutePolicy::default()
    });
    for path in [
        "/charges",
        "/Charges",
        "/CHARGES",
        "/%43harges",
        "/Charges/",
    ] {
        assert_eq!(scope(&p, path), Ok("POST /charges".into()), "{path}");
    }
    let upper = Policy::default()
        .with_route(
            "POST /Accounts/{Id}",
            RoutePolicy {
                case_insensitive: true,
                ..RoutePolicy::default()
            },
        )
        .unwrap();
    assert_eq!(
        scope(&upper, "/accounts/X"),
        Ok("POST /Accounts/{Id}".into())
    );
    let default_folds = Policy::default().with_default_route(RoutePolicy {
        case_insensitive: true,
        ..RoutePolicy::default()
    });
    assert_eq!(
        scope(&default_folds, "/Foo/Bar"),
        Ok("POST /foo/bar".into())
    );
    let clash = Policy::default()
        .with_route(
            "POST /charges",
            RoutePolicy {
                case_insensitive: true,
                ..RoutePolicy::default()
            },
        )
        .unwrap()
        .with_route(
            "POST /Charges",
            RoutePolicy {
                case_insensitive: true,
                ..RoutePolicy::default()
            },
        )
        .unwrap_err();
    assert!(clash.to_string().contains("case_insensitive"), "{clash}");
}

#[test]
fn encoded_slashes_are_refused_unless_the_route_keeps_them() {
    let keep = RoutePolicy {
        encoded_slash: EncodedSlash::Keep,
        ..RoutePolicy::default()
    };
    let p = Policy::default()
        .with_route("POST /projects/{id}/issues", keep)
        .unwrap()
        .with_route("POST /groups/{id}", RoutePolicy::default())
        .unwrap();
    for path in [
        "/projects/group%2Fproject/issues",
        "/projects/group%2fproject/issues",
    ] {
        assert_eq!(
            scope(&p, path),
            Ok("POST /projects/{id}/issues".into()),
            "{path}"
        );
    }
    assert_eq!(scope(&p, "/groups/a%2Fb"), Err("ambiguous-path"));
    assert_eq!(scope(&p, "/other/a%2Fb"), Err("ambiguous-path"));
}

#[test]
fn unmatched_refuse_answers_no_such_route_for_every_covered_path() {
    let mut p = charges(RoutePolicy::default());
    p.unmatched = Unmatched::Refuse;
    assert_eq!(scope(&p, "/charges"), Ok("POST /charges".into()));
    assert_eq!(scope(&p, "/%63harges"), Ok("POST /charges".into()));
    assert_eq!(scope(&p, "/payments"), Err("no-such-route"));
    assert_eq!(scope(&p, "/Charges"), Err("no-such-route"));
    assert_eq!(scope(&p, "//charges"), Err("ambiguous-path"));
    assert!(p.resolve(&Method::PUT, "/payments").is_none());
}

#[test]
fn forward_path_normalised_forwards_the_normal_form_only_when_it_differs() {
    let mut p = charges(RoutePolicy::default());
    let forward = |p: &Policy, path: &str| p.resolve(&Method::POST, path).unwrap().unwrap().forward;
    assert_eq!(forward(&p, "/%63harges"), None, "as sent by default");
    p.forward_path = ForwardPath::Normalised;
    assert_eq!(forward(&p, "/%63harges"), Some("/charges".into()));
    assert_eq!(forward(&p, "/a%2db"), Some("/a-b".into()));
    assert_eq!(forward(&p, "/charges"), None);
}

#[test]
fn templates_not_in_normal_form_are_refused_with_their_spelling() {
    let add = |route: &str| {
        Policy::default()
            .with_route(route, RoutePolicy::default())
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let err = add("POST /%63harges").unwrap_err();
    assert!(err.contains("write `/charges`"), "{err}");
    let err = add("POST /a%2fb").unwrap_err();
    assert!(err.contains("write `/a%2Fb`"), "{err}");
    for bad in ["POST /a//b", "POST /a/./b", "POST /a;v=1", "POST /a\\b"] {
        let err = add(bad).unwrap_err();
        assert!(err.contains("would never match"), "{bad}: {err}");
    }
    for ok in [
        "POST /charges/",
        "POST /a%2Fb",
        "POST /caf%C3%A9",
        "POST /a/%7Bx%7D",
    ] {
        assert_eq!(add(ok), Ok(()), "{ok}");
    }
}
