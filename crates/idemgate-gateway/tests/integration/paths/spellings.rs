//! The spellings an attacker ran twice through the gateway: an escape of a character that
//! may appear raw (`%40`, `%3A`), a covered method in lower case, a sibling template that
//! undid `case_insensitive` or `trailing_slash = "same"`, and a path too long to store.
//! Each gets one execution, or a refusal with nothing forwarded.

use idemgate_gateway::config::RouteTable;

use super::{post_raw, raw};
use crate::support::*;

#[tokio::test]
async fn an_escaped_at_sign_is_the_scope_of_the_raw_one() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |c| {
        c.routes = vec![RouteTable::route("POST /v1/payments:capture")];
    })
    .await;
    for (first, second) in [
        (
            "/users/alice@example.com/charges",
            "/users/alice%40example.com/charges",
        ),
        ("/v1/payments:capture", "/v1/payments%3Acapture"),
        ("/caf%C3%A9", "/caf%c3%a9"),
    ] {
        let k = key();
        assert_eq!(post_raw(&gw, first, Some(&k), "").await.status, 201);
        let again = post_raw(&gw, second, Some(&k), "").await;
        assert_ne!(again.status, 201, "{second} ran again: {}", again.head);
        let replayed = again.head.contains("idempotent-replayed: true");
        assert!(
            replayed || (again.status, again.problem()) == (422, "fingerprint-mismatch".into()),
            "{second}: {}",
            again.head
        );
    }
    let bad = post_raw(&gw, "/users/%C0%AF", Some(&key()), "").await;
    assert_eq!((bad.status, bad.problem()), (400, "ambiguous-path".into()));
    assert_eq!(up.count(), 3, "one execution per operation");
    gw.stop().await;
}

#[tokio::test]
async fn a_covered_method_in_lower_case_is_refused_unforwarded() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |_| {}).await;
    for method in ["post", "Post", "patch"] {
        for key in [format!("idempotency-key: {}\r\n", key()), String::new()] {
            let head = format!(
                "{method} /charges HTTP/1.1\r\nauthorization: Bearer alice\r\ncontent-length: 2\r\n{key}"
            );
            let a = raw(&gw, &head, "{}").await;
            assert_eq!(
                (a.status, a.problem()),
                (400, "ambiguous-request".into()),
                "{method}"
            );
            assert!(a.body.contains(&format!("`{method}`")), "{}", a.body);
        }
    }
    assert_eq!(up.count(), 0, "nothing forwarded");
    let get = raw(&gw, "get /charges HTTP/1.1\r\n", "").await;
    assert_eq!(get.status, 201, "a method no covered one spells passes");
    gw.stop().await;
}

fn route(template: &str, edit: impl FnOnce(&mut RouteTable)) -> RouteTable {
    let mut r = RouteTable::route(template);
    edit(&mut r);
    r
}

#[tokio::test]
async fn a_sibling_template_cannot_undo_folding_or_a_trailing_slash() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |c| {
        c.routes = vec![
            route("POST /api/pay", |r| r.set("case_insensitive", true)),
            route("POST /api/{resource}", |_| {}),
            route("POST /pay", |r| r.set("trailing_slash", "same")),
            route("POST /{*rest}", |_| {}),
        ];
    })
    .await;
    for path in ["/api/PAY", "/pay/"] {
        for key in [Some(key()), None] {
            let a = post_raw(&gw, path, key.as_deref(), "").await;
            assert_eq!(
                (a.status, a.problem()),
                (400, "ambiguous-path".into()),
                "{path}"
            );
        }
    }
    let a = post_raw(&gw, "/api/PAY", None, "").await;
    assert!(a.body.contains("`POST /api/{resource}`") && a.body.contains("`POST /api/pay`"));
    assert_eq!(up.count(), 0, "nothing forwarded");
    for path in ["/api/pay", "/pay", "/api/refund"] {
        assert_eq!(
            post_raw(&gw, path, Some(&key()), "").await.status,
            201,
            "{path}"
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn an_unmatched_path_too_long_to_store_gets_414_unforwarded() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |_| {}).await;
    let long = format!("/{}", "x".repeat(2000));
    for key in [Some(key()), None] {
        let a = post_raw(&gw, &long, key.as_deref(), "").await;
        assert_eq!((a.status, a.problem()), (414, "path-too-long".into()));
        assert!(a.body.contains("1024 bytes"), "{}", a.body);
    }
    assert_eq!(up.count(), 0, "nothing forwarded");
    gw.stop().await;
}

#[test]
fn config_check_gives_the_normal_spelling_of_a_template() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("paths.toml");
    std::fs::write(
        &file,
        "upstream = \"http://127.0.0.1:3000\"\n\
         [[routes]]\nroute = \"POST /v1/payments%3Acapture\"\n\
         [[routes]]\nroute = \"POST /users/caf\u{e9}/{id}\"\n",
    )
    .unwrap();
    let (code, text) = run_idemgate(&["config", "check", file.to_str().unwrap()]);
    assert_eq!(code, 2, "{text}");
    for right in [
        "write `/v1/payments:capture`",
        "write `/users/caf%C3%A9/{id}`",
    ] {
        assert!(text.contains(right), "{right} in {text}");
    }
}
