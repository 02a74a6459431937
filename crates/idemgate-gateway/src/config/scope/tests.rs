use std::io::Write;

use super::*;

const BASE: &str = "upstream = \"http://127.0.0.1:3000\"\n";

fn scope(text: &str) -> ScopeSettings {
    let text = format!("{BASE}{text}");
    let config = Config::from_toml(&text).unwrap();
    config.validate().unwrap().base.scope
}

/// What changes between the configuration `old` and `new` (each appended to [`BASE`]).
fn changes(old: &str, new: &str) -> Vec<String> {
    scope(old).changes(&scope(new))
}

/// A file holding `bytes`, kept until the handle drops.
fn file(bytes: &[u8]) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(bytes).unwrap();
    f
}

fn hash_key(path: &std::path::Path) -> String {
    format!("principal_hash_key_file = \"{}\"\n", path.display())
}

#[test]
fn settings_that_leave_every_scope_alone_change_nothing() {
    let before = "[defaults]\nrecord_ttl = \"24h\"\n[[routes]]\nroute = \"POST /a\"\n";
    let after = "key_min_length = 16\nheader_name = \"idempotency-KEY\"\n\
                 [defaults]\nrecord_ttl = \"1h\"\nkey_required = true\nfail_open = true\n\
                 [[routes]]\nroute = \"POST  /a\"\nlease_ttl = \"30s\"\n";
    assert_eq!(changes(before, after), Vec::<String>::new());
}

#[test]
fn each_scope_setting_is_named_with_its_values() {
    let cases = [
        (
            "header_name = \"x-idempotency-key\"\n",
            "header_name (`idempotency-key` to `x-idempotency-key`)",
        ),
        ("methods = [\"POST\"]\n", "methods (`PATCH POST` to `POST`)"),
        (
            "[defaults]\nprincipal = \"header:x-user-id\"\n",
            "defaults.principal (`authorization` to `header:x-user-id`)",
        ),
        (
            "[[routes]]\nroute = \"POST /payments\"\n",
            "routes: `POST /payments` added",
        ),
        (
            "unmatched = \"refuse\"\n",
            "unmatched (`default` to `refuse`)",
        ),
        (
            "forward_path = \"normalised\"\n",
            "forward_path (`as-sent` to `normalised`)",
        ),
        (
            "[defaults]\ncase_insensitive = true\n",
            "defaults.case_insensitive (`false` to `true`)",
        ),
        (
            "[defaults]\ntrailing_slash = \"same\"\n",
            "defaults.trailing_slash (`refuse` to `same`)",
        ),
        (
            "[defaults]\nencoded_slash = \"keep\"\n",
            "defaults.encoded_slash (`refuse` to `keep`)",
        ),
    ];
    for (new, named) in cases {
        let found = changes("", new);
        assert!(found.iter().any(|c| c == named), "{new:?}: {found:?}");
    }
    let route = "[[routes]]\nroute = \"POST /payments/{id}\"\n";
    assert_eq!(
        changes(route, ""),
        ["routes: `POST /payments/{id}` removed"]
    );
    assert_eq!(
        changes(route, &format!("{route}principal = \"header:x-user\"\n")),
        ["routes[`POST /payments/{id}`].principal (`authorization` to `header:x-user`)"]
    );
    assert_eq!(
        changes(route, &format!("{route}trailing_slash = \"same\"\n")),
        ["routes[`POST /payments/{id}`].trailing_slash (`refuse` to `same`)"]
    );
}

#[test]
fn a_route_of_a_new_method_covers_that_method_too() {
    let found = changes("", "[[routes]]\nroute = \"PUT /payments/{id}\"\n");
    assert_eq!(
        found,
        [
            "methods (`PATCH POST` to `PATCH POST PUT`)",
            "routes: `PUT /payments/{id}` added"
        ]
    );
}

/// The key counts by its contents: the same path with other contents moves every
/// `authorization` caller; another path with the same contents moves none.
#[test]
fn the_principal_hash_key_counts_by_its_contents() {
    let (a, same) = (file(&[b'a'; 32]), file(&[b'a'; 32]));
    let old = scope(&hash_key(a.path()));
    assert_eq!(
        old.changes(&scope(&hash_key(same.path()))),
        Vec::<String>::new()
    );
    std::fs::write(a.path(), [b'b'; 32]).unwrap();
    let found = old.changes(&scope(&hash_key(a.path())));
    assert_eq!(found, ["principal_hash_key_file (its key)"]);
    let removed = old.changes(&scope(""));
    assert!(
        removed.contains(&"defaults.principal (`authorization-hmac` to `authorization`)".into()),
        "{removed:?}"
    );
    let text = format!("{:?}", removed);
    assert!(!text.contains("aaaa"), "no key material: {text}");
}

/// A key that no route scopes by moves nothing.
#[test]
fn a_principal_hash_key_no_route_uses_changes_nothing() {
    let a = file(&[b'a'; 32]);
    let header = "[defaults]\nprincipal = \"header:x-user\"\n";
    assert_eq!(
        changes(header, &format!("{}{header}", hash_key(a.path()))),
        Vec::<String>::new()
    );
}

#[test]
fn the_jwt_issuer_counts_when_a_route_scopes_by_a_claim() {
    let secret = file(&[b's'; 32]);
    let jwt = |principal: &str, issuer: &str| {
        format!(
            "[defaults]\nprincipal = \"{principal}\"\n[jwt]\nhs256_secret_file = \"{}\"\nissuer = \"{issuer}\"\n",
            secret.path().display()
        )
    };
    assert_eq!(
        changes(&jwt("jwt:sub", "https://a"), &jwt("jwt:sub", "https://b")),
        ["jwt.issuer (`https://a` to `https://b`)"]
    );
    assert_eq!(
        changes(
            &jwt("authorization", "https://a"),
            &jwt("authorization", "https://b")
        ),
        Vec::<String>::new(),
        "no route reads the token"
    );
}
