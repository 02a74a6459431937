//! The spellings an attacker ran twice: escapes of characters allowed raw, a method in
//! another letter case, a sibling template undoing folding or a trailing slash, and a path
//! too long to be stored.

use http::Method;

use super::{charges, scope};
use crate::path::TrailingSlash;
use crate::policy::{Policy, RoutePolicy, MAX_SCOPE_ROUTE_BYTES};
use crate::rejection::IdempotencyRejection;

#[test]
fn escapes_of_characters_allowed_raw_reach_the_scope_of_the_raw_spelling() {
    let p = charges(RoutePolicy::default())
        .with_route("POST /v1/payments:capture", RoutePolicy::default())
        .unwrap();
    for (a, b) in [
        (
            "/users/alice@example.com/charges",
            "/users/alice%40example.com/charges",
        ),
        ("/a+b", "/a%2Bb"),
        ("/a!", "/a%21"),
        ("/a:b", "/a%3ab"),
        ("/caf%C3%A9", "/caf\u{e9}"),
        ("/caf%C3%A9", "/caf%c3%a9"),
        ("/%7B%7D", "/{}"),
        ("/accounts/a@b/refunds", "/accounts/a%40b/refunds"),
    ] {
        assert_eq!(scope(&p, a), scope(&p, b), "{a} and {b}");
        assert!(scope(&p, a).is_ok(), "{a}");
    }
    assert_eq!(
        scope(&p, "/users/alice%40example.com/charges"),
        Ok("POST /users/alice@example.com/charges".into())
    );
    for capture in [
        "/v1/payments:capture",
        "/v1/payments%3Acapture",
        "/v1/payments%3acapture",
    ] {
        assert_eq!(
            scope(&p, capture),
            Ok("POST /v1/payments:capture".into()),
            "{capture}"
        );
    }
    assert_eq!(scope(&p, "/a%C0%AF"), Err("ambiguous-path"));
    assert_eq!(scope(&p, "/%FF"), Err("ambiguous-path"));
}

#[test]
fn a_covered_method_in_another_letter_case_is_refused() {
    let p = Policy::default()
        .with_route("PUT /things/{id}", RoutePolicy::default())
        .unwrap();
    for (sent, covered) in [
        ("post", "POST"),
        ("Post", "POST"),
        ("patch", "PATCH"),
        ("pUt", "PUT"),
    ] {
        let method = Method::from_bytes(sent.as_bytes()).unwrap();
        let refused = p
            .resolve(&method, "/things/1")
            .expect("refused")
            .unwrap_err();
        assert_eq!(refused.anchor(), "ambiguous-request", "{sent}");
        assert_eq!(refused.status(), 400);
        assert!(refused.detail().contains(&format!("`{sent}`")), "{sent}");
        assert!(p.resolve(&method, "//things").unwrap().is_err(), "{sent}");
        let exact = Method::from_bytes(covered.as_bytes()).unwrap();
        assert!(p.resolve(&exact, "/things/1").unwrap().is_ok());
    }
    for uncovered in ["get", "GET", "delete", "POSTS"] {
        let method = Method::from_bytes(uncovered.as_bytes()).unwrap();
        assert!(p.resolve(&method, "/things/1").is_none(), "{uncovered}");
    }
}

fn sibling(route: &str, sibling: &str) -> Result<String, IdempotencyRejection> {
    Err(IdempotencyRejection::AmbiguousRoute {
        route: route.into(),
        sibling: sibling.into(),
    })
}

fn resolve(p: &Policy, path: &str) -> Result<String, IdempotencyRejection> {
    p.resolve(&Method::POST, path)
        .unwrap()
        .map(|r| r.route.into_owned())
}

#[test]
fn a_sibling_template_does_not_undo_case_insensitive() {
    let folds = RoutePolicy {
        case_insensitive: true,
        ..RoutePolicy::default()
    };
    let p = Policy::default()
        .with_route("POST /api/pay", folds.clone())
        .unwrap()
        .with_route("POST /api/{resource}", RoutePolicy::default())
        .unwrap();
    for spelled in ["/api/PAY", "/api/Pay", "/API/pay"] {
        let want = if spelled.starts_with("/API") {
            // Only the folding route matches: no sibling.
            Ok("POST /api/pay".into())
        } else {
            sibling("POST /api/{resource}", "POST /api/pay")
        };
        assert_eq!(resolve(&p, spelled), want, "{spelled}");
    }
    assert_eq!(resolve(&p, "/api/pay"), Ok("POST /api/pay".into()));
    assert_eq!(
        resolve(&p, "/api/refund"),
        Ok("POST /api/{resource}".into())
    );
    // A plain overlap (a static segment and a parameter) is the router's, as before.
    let plain = Policy::default()
        .with_route("POST /api/Pay", RoutePolicy::default())
        .unwrap()
        .with_route("POST /api/{resource}", folds)
        .unwrap();
    assert_eq!(resolve(&plain, "/api/Pay"), Ok("POST /api/Pay".into()));
    assert_eq!(
        resolve(&plain, "/api/PAY"),
        Ok("POST /api/{resource}".into())
    );
}

#[test]
fn a_sibling_template_does_not_undo_trailing_slash_same() {
    let same = RoutePolicy {
        trailing_slash: TrailingSlash::Same,
        ..RoutePolicy::default()
    };
    let p = Policy::default()
        .with_route("POST /pay", same.clone())
        .unwrap()
        .with_route("POST /{*rest}", RoutePolicy::default())
        .unwrap();
    assert_eq!(resolve(&p, "/pay/"), sibling("POST /{*rest}", "POST /pay"));
    assert_eq!(resolve(&p, "/pay"), Ok("POST /pay".into()));
    assert_eq!(resolve(&p, "/other/"), Ok("POST /{*rest}".into()));
    let folded = Policy::default()
        .with_route(
            "POST /pay",
            RoutePolicy {
                case_insensitive: true,
                ..same.clone()
            },
        )
        .unwrap()
        .with_route("POST /{*rest}", RoutePolicy::default())
        .unwrap();
    assert_eq!(
        resolve(&folded, "/PAY/"),
        sibling("POST /{*rest}", "POST /pay")
    );
    // A catch-all with `Same` matches `/pay` as it is too: the router's choice, as before.
    let both = Policy::default()
        .with_route("POST /pay", RoutePolicy::default())
        .unwrap()
        .with_route("POST /{*rest}", same)
        .unwrap();
    assert_eq!(resolve(&both, "/pay"), Ok("POST /pay".into()));
}

#[test]
fn an_unmatched_scope_longer_than_the_limit_is_refused() {
    let p = charges(RoutePolicy::default())
        .with_route("POST /files/{*path}", RoutePolicy::default())
        .unwrap();
    let fits = format!("/{}", "a".repeat(MAX_SCOPE_ROUTE_BYTES - "POST /".len()));
    assert_eq!(scope(&p, &fits), Ok(format!("POST {fits}")));
    let over = format!("{fits}b");
    let refused = p.resolve(&Method::POST, &over).unwrap().unwrap_err();
    assert_eq!(refused, IdempotencyRejection::PathTooLong { limit: 1024 });
    assert_eq!(refused.status(), 414);
    assert_eq!(
        scope(&p, &format!("/{}", "x".repeat(2000))),
        Err("path-too-long")
    );
    // Measured in normal form: escapes of raw characters shrink, raw UTF-8 grows.
    let decoded = format!("/{}", "%40".repeat(300));
    assert!(scope(&p, &decoded).is_ok());
    let grown = format!("/{}", "\u{e9}".repeat(200));
    assert_eq!(scope(&p, &grown), Err("path-too-long"));
    // A matched route is scoped by its template, however long the path.
    let long = format!("/files/{}", "x".repeat(2000));
    assert_eq!(scope(&p, &long), Ok("POST /files/{*path}".into()));
}

#[test]
fn templates_are_checked_in_the_new_normal_form() {
    let add = |route: &str| {
        Policy::default()
            .with_route(route, RoutePolicy::default())
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    for (bad, right) in [
        ("POST /v1/payments%3Acapture", "/v1/payments:capture"),
        ("POST /users%40x/{id}", "/users@x/{id}"),
        ("POST /caf\u{e9}/{id}", "/caf%C3%A9/{id}"),
        ("POST /a/{{x}}", "/a/%7Bx%7D"),
        ("POST /a%2b{id}", "/a+{id}"),
    ] {
        let err = add(bad).unwrap_err();
        assert!(err.contains(&format!("write `{right}`")), "{bad}: {err}");
    }
    let err = add("POST /a%FF").unwrap_err();
    assert!(
        err.contains("not UTF-8") && err.contains("never match"),
        "{err}"
    );
    let long = format!("POST /{}", "a".repeat(MAX_SCOPE_ROUTE_BYTES));
    assert!(add(&long).unwrap_err().contains("1024 bytes"));
    for ok in [
        "POST /v1/payments:capture",
        "POST /users@x/{id}/{*rest}",
        "POST /a+b!",
    ] {
        assert_eq!(add(ok), Ok(()), "{ok}");
    }
}
