use std::sync::Arc;

#[cfg(feature = "jwt")]
use http::header::AUTHORIZATION;
#[cfg(feature = "jwt")]
use jsonwebtoken::{encode, EncodingKey, Header};

use std::fmt;

use super::*;
#[cfg(feature = "jwt")]
use crate::jwt::JwtVerifier;

#[cfg(feature = "jwt")]
const SECRET: &[u8] = b"an-hs256-test-secret-of-32-bytes!!";

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

/// The principal `source` gives a request with `headers`.
fn principal_of(
    headers: &HeaderMap,
    source: &PrincipalSource,
) -> Result<Option<String>, IdempotencyRejection> {
    let (mut parts, ()) = Request::new(()).into_parts();
    parts.headers = headers.clone();
    source.principal(&parts)
}

fn user_header() -> PrincipalSource {
    PrincipalSource::Header(HeaderName::from_static("x-user-id"))
}

#[cfg(feature = "jwt")]
fn jwt_source() -> PrincipalSource {
    PrincipalSource::Jwt {
        claim: "sub".into(),
        verifier: Arc::new(JwtVerifier::new().with_hs256_secret(SECRET).unwrap()),
    }
}

#[cfg(feature = "jwt")]
fn token(sub: &str) -> String {
    let exp = jsonwebtoken::get_current_timestamp() + 600;
    let claims = serde_json::json!({"sub": sub, "exp": exp});
    encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(SECRET),
    )
    .unwrap()
}

fn ambiguous(header: &str) -> IdempotencyRejection {
    IdempotencyRejection::AmbiguousPrincipal {
        header: header.into(),
    }
}

#[test]
fn a_principal_header_names_one_caller() {
    let src = user_header();
    let one = headers(&[("x-user-id", " alice ")]);
    assert_eq!(principal_of(&one, &src), Ok(Some("hdr:alice".into())));
    assert_eq!(principal_of(&headers(&[]), &src), Ok(None));
    assert_eq!(
        principal_of(&headers(&[("x-user-id", " ")]), &src),
        Ok(None)
    );
    for repeated in [
        &[("x-user-id", "alice"), ("x-user-id", "bob")][..],
        &[("x-user-id", "alice"), ("x-user-id", "alice")],
        &[("x-user-id", ""), ("x-user-id", "bob")],
        &[("x-user-id", "alice,bob")],
        &[("x-user-id", "alice, bob")],
        &[("x-user-id", ",")],
    ] {
        assert_eq!(
            principal_of(&headers(repeated), &src),
            Err(ambiguous("x-user-id")),
            "{repeated:?}"
        );
    }
    // Not "no caller" (which `allow_anonymous` would share): refused.
    for bytes in [&b"jos\xc3\xa9"[..], b"zo\xeb"] {
        let mut h = HeaderMap::new();
        h.insert("x-user-id", HeaderValue::from_bytes(bytes).unwrap());
        assert_eq!(principal_of(&h, &src), Err(ambiguous("x-user-id")));
    }
}

#[test]
fn the_authorization_hash_is_unchanged() {
    let src = PrincipalSource::AuthorizationHash;
    let a = principal_of(&headers(&[("authorization", "Bearer alice")]), &src).unwrap();
    assert!(a.unwrap().starts_with("auth:"));
    let both = headers(&[("authorization", "Bearer a"), ("authorization", "Bearer b")]);
    let one = headers(&[("authorization", "Bearer a")]);
    assert_ne!(principal_of(&both, &src), principal_of(&one, &src));
}

#[cfg(feature = "jwt")]
#[test]
fn a_jwt_principal_needs_one_valid_bearer_token() {
    let src = jwt_source();
    let bearer = |t: &str| headers(&[("authorization", &format!("Bearer {t}"))]);
    let alice = principal_of(&bearer(&token("alice")), &src)
        .unwrap()
        .unwrap();
    assert!(alice.starts_with("jwt:sub:"), "{alice}");
    let lower = headers(&[("authorization", &format!("bearer  {}", token("alice")))]);
    assert_eq!(principal_of(&lower, &src), Ok(Some(alice)));
    assert_eq!(principal_of(&headers(&[]), &src), Ok(None));
    assert_eq!(
        principal_of(&headers(&[("authorization", "")]), &src),
        Ok(None)
    );
    let invalid = IdempotencyRejection::InvalidToken;
    for scheme in ["Basic YWxpY2U6cHc=", "Bearer", "Bearer ", &token("alice")] {
        let h = headers(&[("authorization", scheme)]);
        assert_eq!(
            principal_of(&h, &src),
            Err(invalid(TokenError::NotBearer)),
            "{scheme}"
        );
    }
    let mut h = bearer(&token("alice"));
    h.append(
        AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {}", token("bob"))).unwrap(),
    );
    assert_eq!(principal_of(&h, &src), Err(ambiguous("authorization")));
    let two = format!("Bearer {}, Bearer {}", token("alice"), token("bob"));
    assert_eq!(
        principal_of(&headers(&[("authorization", &two)]), &src),
        Err(invalid(TokenError::Malformed))
    );
}

#[test]
fn the_operator_computes_the_gateway_principal_from_the_header() {
    let src = PrincipalSource::AuthorizationHash;
    let a = principal_of(&headers(&[("authorization", "Bearer alice")]), &src).unwrap();
    let by_value = crate::authorization_principal([b"Bearer alice".as_slice()]);
    assert_eq!(a, by_value);
    assert_ne!(
        by_value,
        crate::authorization_principal([b"Bearer bob".as_slice()])
    );
    assert_eq!(crate::authorization_principal([b"  ".as_slice()]), None);
}

#[derive(Clone, Debug)]
struct UserId(u64);

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "u{}", self.0)
    }
}

#[test]
fn an_extension_names_the_caller_and_client_headers_do_not() {
    let src = PrincipalSource::extension::<UserId>();
    let forged = headers(&[("x-user-id", "bob"), ("authorization", "Bearer bob")]);
    let (mut parts, ()) = Request::new(()).into_parts();
    parts.headers = forged.clone();
    assert_eq!(src.principal(&parts), Ok(None), "no extension: no caller");
    parts.extensions.insert(UserId(7));
    assert_eq!(src.principal(&parts), Ok(Some("ext:u7".into())));
    parts.headers = HeaderMap::new();
    assert_eq!(src.principal(&parts), Ok(Some("ext:u7".into())));
}

#[test]
fn a_closure_names_the_caller_under_its_own_prefix() {
    let src = PrincipalSource::from_fn(|parts| {
        let tenant = parts.headers.get("x-tenant")?.to_str().ok()?;
        Some(format!("tenant-{tenant}"))
    });
    let one = headers(&[("x-tenant", "acme")]);
    assert_eq!(principal_of(&one, &src), Ok(Some("fn:tenant-acme".into())));
    assert_eq!(principal_of(&headers(&[]), &src), Ok(None));
    let blank = PrincipalSource::from_fn(|_| Some(String::new()));
    assert_eq!(
        principal_of(&one, &blank),
        Ok(None),
        "an empty name is no caller"
    );
    assert_eq!(src, src.clone(), "a custom source equals itself");
    assert_ne!(src, blank);
}

#[test]
fn the_keyed_authorization_hash_depends_on_the_key_and_never_equals_the_plain_one() {
    assert_eq!(
        PrincipalHashKey::new(&[7; 31]),
        Err(PrincipalHashKeyTooShort(31))
    );
    let key = |b| Arc::new(PrincipalHashKey::new(&[b; 32]).unwrap());
    let (a, b) = (
        PrincipalSource::AuthorizationHmac(key(1)),
        PrincipalSource::AuthorizationHmac(key(2)),
    );
    let basic = headers(&[("authorization", "Basic YWxpY2U6aHVudGVyMg==")]);
    let pa = principal_of(&basic, &a).unwrap().unwrap();
    assert!(pa.starts_with("hauth:") && pa.len() == 6 + 32, "{pa}");
    assert_eq!(principal_of(&basic, &a).unwrap().unwrap(), pa, "stable");
    assert_ne!(principal_of(&basic, &b).unwrap().unwrap(), pa, "keyed");
    let plain = principal_of(&basic, &PrincipalSource::AuthorizationHash).unwrap();
    assert_ne!(plain.unwrap(), pa);
    assert_eq!(
        principal_of(&headers(&[("authorization", " ")]), &a),
        Ok(None)
    );
    assert_eq!(
        principal_from_authorization(&a, "Basic YWxpY2U6aHVudGVyMg=="),
        Ok(Some(pa))
    );
    assert!(!format!("{a:?}").contains("1, 1"), "the key is never shown");
}
