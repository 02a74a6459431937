use jsonwebtoken::{encode, EncodingKey, Header};
use serde_json::json;

use super::*;

const SECRET: &[u8] = b"an-hs256-test-secret-of-32-bytes!!";

/// The gateway's test-only keys (see their README).
fn data(name: &str) -> Vec<u8> {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../idemgate-gateway/tests/data/jwt"
    );
    std::fs::read(format!("{dir}/{name}")).unwrap()
}

fn now() -> i64 {
    jsonwebtoken::get_current_timestamp() as i64
}

fn hs256() -> JwtVerifier {
    JwtVerifier::new().with_hs256_secret(SECRET).unwrap()
}

fn sign_hs(claims: &Value) -> String {
    encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(SECRET),
    )
    .unwrap()
}

fn sign_with(alg: Algorithm, kid: Option<&str>, pem: &str, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    let pem = data(pem);
    let key = match alg {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(&pem),
        Algorithm::ES256 => EncodingKey::from_ec_pem(&pem),
        _ => EncodingKey::from_ed_pem(&pem),
    }
    .unwrap();
    encode(&header, claims, &key).unwrap()
}

fn claims(sub: Value) -> Value {
    static JTI: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let jti = JTI.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    json!({"sub": sub, "iat": now(), "exp": now() + 600, "jti": jti})
}

#[test]
fn a_refreshed_token_of_the_same_subject_keeps_the_principal() {
    let v = hs256();
    let first =
        sign_hs(&json!({"sub": "user_1", "iat": now() - 3600, "exp": now() + 5, "jti": "a"}));
    let refreshed =
        sign_hs(&json!({"sub": "user_1", "iat": now(), "exp": now() + 3600, "jti": "b"}));
    assert_ne!(first, refreshed);
    let p = v.principal(&first, "sub").unwrap();
    assert_eq!(p, v.principal(&refreshed, "sub").unwrap());
    assert!(
        p.starts_with("jwt:sub:") && p.len() == "jwt:sub:".len() + 32,
        "{p}"
    );
    assert!(
        !p.contains("user_1"),
        "the subject is not stored in clear: {p}"
    );
    let other = sign_hs(&claims(json!("user_2")));
    assert_ne!(p, v.principal(&other, "sub").unwrap());
}

#[test]
fn the_issuer_is_part_of_the_principal() {
    let v = hs256();
    let a = sign_hs(&json!({"sub": "1", "iss": "https://a.example", "exp": now() + 60}));
    let b = sign_hs(&json!({"sub": "1", "iss": "https://b.example", "exp": now() + 60}));
    assert_ne!(
        v.principal(&a, "sub").unwrap(),
        v.principal(&b, "sub").unwrap()
    );
    // Length-prefixed: a NUL moved between issuer and subject is another principal.
    let p = |iss: &str, sub: &str| {
        let t = sign_hs(&json!({"sub": sub, "iss": iss, "exp": now() + 60}));
        v.principal(&t, "sub").unwrap()
    };
    assert_ne!(p("x\0y", "z"), p("x", "y\0z"));
    // The recipe of docs/configuration.md for finding a caller's records.
    assert_eq!(
        p("https://auth.example.com", "user_123"),
        "jwt:sub:f39865bdfc715038dd2c82b96894da8c"
    );
    // A non-string issuer would hash as "no issuer": refused.
    for iss in [
        json!(["https://a.example"]),
        json!(7),
        json!({"a": 1}),
        json!(""),
    ] {
        let t = sign_hs(&json!({"sub": "1", "iss": iss, "exp": now() + 60}));
        assert!(
            matches!(v.principal(&t, "sub"), Err(TokenError::BadClaim(c)) if c == "iss"),
            "{iss}"
        );
    }
}

#[test]
fn claims_are_strings_or_integers() {
    let v = hs256();
    let t = sign_hs(&json!({"sub": "u", "tenant": 42, "exp": now() + 60}));
    assert!(v
        .principal(&t, "tenant")
        .unwrap()
        .starts_with("jwt:tenant:"));
    let as_text = sign_hs(&json!({"tenant": "42", "exp": now() + 60}));
    assert_eq!(
        v.principal(&t, "tenant").unwrap(),
        v.principal(&as_text, "tenant").unwrap()
    );
    assert_eq!(
        v.principal(&t, "org"),
        Err(TokenError::MissingClaim("org".into()))
    );
    for bad in [json!(true), json!(""), json!(1.5), json!(-0.0)] {
        let t = sign_hs(&json!({"sub": bad, "exp": now() + 60}));
        assert_eq!(
            v.principal(&t, "sub"),
            Err(TokenError::BadClaim("sub".into())),
            "{bad}"
        );
    }
    // jsonwebtoken refuses a structured `sub` while checking the registered claims.
    for structured in [json!({"id": 1}), json!(["a"])] {
        let t = sign_hs(&json!({"sub": structured, "exp": now() + 60}));
        assert!(v.principal(&t, "sub").is_err(), "{structured}");
    }
    let null = sign_hs(&json!({"sub": null, "exp": now() + 60}));
    assert_eq!(
        v.principal(&null, "sub"),
        Err(TokenError::MissingClaim("sub".into()))
    );
}

#[test]
fn time_claims_are_checked_with_leeway() {
    let v = hs256().with_leeway(Duration::from_secs(30));
    let expired = sign_hs(&json!({"sub": "u", "exp": now() - 120}));
    assert_eq!(v.verify(&expired).unwrap_err(), TokenError::Expired);
    let within_leeway = sign_hs(&json!({"sub": "u", "exp": now() - 5}));
    v.verify(&within_leeway).unwrap();
    let early = sign_hs(&json!({"sub": "u", "exp": now() + 600, "nbf": now() + 300}));
    assert_eq!(v.verify(&early).unwrap_err(), TokenError::NotYetValid);
    let no_exp = sign_hs(&json!({"sub": "u"}));
    assert_eq!(
        v.verify(&no_exp).unwrap_err(),
        TokenError::MissingClaim("exp".into())
    );
    let text_exp = sign_hs(&json!({"sub": "u", "exp": "tomorrow"}));
    assert!(v.verify(&text_exp).is_err());
}

#[test]
fn issuer_and_audience_are_required_when_configured() {
    let v = hs256()
        .with_issuer("https://auth.example.com")
        .with_audience("payments-api");
    let good = json!({"sub": "u", "exp": now() + 60, "iss": "https://auth.example.com", "aud": "payments-api"});
    v.verify(&sign_hs(&good)).unwrap();
    let listed = json!({"sub": "u", "exp": now() + 60, "iss": "https://auth.example.com", "aud": ["other", "payments-api"]});
    v.verify(&sign_hs(&listed)).unwrap();
    let cases = [
        (
            "iss",
            json!("https://evil.example"),
            TokenError::WrongIssuer,
        ),
        ("aud", json!("other-api"), TokenError::WrongAudience),
        ("iss", Value::Null, TokenError::MissingClaim("iss".into())),
        ("aud", Value::Null, TokenError::MissingClaim("aud".into())),
    ];
    for (field, value, want) in cases {
        let mut c = good.clone();
        if value.is_null() {
            c.as_object_mut().unwrap().remove(field);
        } else {
            c[field] = value;
        }
        assert_eq!(v.verify(&sign_hs(&c)).unwrap_err(), want, "{c}");
    }
    // Without a configured audience any `aud` passes.
    hs256().verify(&sign_hs(&good)).unwrap();
}

#[test]
fn forged_and_unsigned_tokens_are_refused() {
    let v = hs256();
    let c = claims(json!("u"));
    let forged = encode(
        &Header::new(Algorithm::HS256),
        &c,
        &EncodingKey::from_secret(b"another-secret-of-thirty-two-bytes"),
    )
    .unwrap();
    assert_eq!(v.verify(&forged).unwrap_err(), TokenError::BadSignature);
    // Same signature, other payload.
    let good = sign_hs(&c);
    let other = sign_hs(&claims(json!("admin")));
    let parts: Vec<&str> = good.split('.').collect();
    let other_parts: Vec<&str> = other.split('.').collect();
    let tampered = format!("{}.{}.{}", parts[0], other_parts[1], parts[2]);
    assert_eq!(v.verify(&tampered).unwrap_err(), TokenError::BadSignature);
    // alg=none, with and without a signature part.
    use base64::Engine as _;
    let b64 = |v: &Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
    };
    let none = format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "typ": "JWT"})),
        b64(&c)
    );
    assert_eq!(
        v.verify(&none).unwrap_err(),
        TokenError::AlgorithmNotAllowed("none".into())
    );
    let none_sig = format!("{}.{}.{}", b64(&json!({"alg": "None"})), b64(&c), parts[2]);
    assert!(matches!(
        v.verify(&none_sig),
        Err(TokenError::AlgorithmNotAllowed(_))
    ));
    for junk in ["", "abc", "a.b.c", "..", "Bearer x"] {
        assert_eq!(v.verify(junk).unwrap_err(), TokenError::Malformed, "{junk}");
    }
    let hs384 = encode(
        &Header::new(Algorithm::HS384),
        &c,
        &EncodingKey::from_secret(SECRET),
    )
    .unwrap();
    assert!(matches!(
        v.verify(&hs384),
        Err(TokenError::AlgorithmNotAllowed(_))
    ));
}

#[test]
fn jwks_keys_are_chosen_by_kid_and_hold_their_algorithm() {
    let v = JwtVerifier::new().with_jwks(&data("jwks.json")).unwrap();
    let c = claims(json!("u"));
    let rs = sign_with(Algorithm::RS256, Some("rsa-1"), "rsa.pem", &c);
    let es = sign_with(Algorithm::ES256, Some("ec-1"), "ec.pem", &c);
    let ed = sign_with(Algorithm::EdDSA, Some("ed-1"), "ed25519.pem", &c);
    let p = v.principal(&rs, "sub").unwrap();
    assert_eq!(p, v.principal(&es, "sub").unwrap());
    assert_eq!(p, v.principal(&ed, "sub").unwrap());
    // A key used under another key's kid.
    let swapped = sign_with(Algorithm::ES256, Some("rsa-1"), "ec.pem", &c);
    assert!(matches!(
        v.verify(&swapped),
        Err(TokenError::AlgorithmNotAllowed(_))
    ));
    let unknown = sign_with(Algorithm::RS256, Some("rsa-2"), "rsa.pem", &c);
    assert_eq!(v.verify(&unknown).unwrap_err(), TokenError::UnknownKey);
    let no_kid = sign_with(Algorithm::RS256, None, "rsa.pem", &c);
    assert_eq!(v.verify(&no_kid).unwrap_err(), TokenError::UnknownKey);
    // No secret configured: HS256 is refused, even keyed by the RSA modulus (alg confusion).
    let set: Value = serde_json::from_slice(&data("jwks.json")).unwrap();
    let n = set["keys"][0]["n"].as_str().unwrap();
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("rsa-1".into());
    let confused = encode(&header, &c, &EncodingKey::from_secret(n.as_bytes())).unwrap();
    assert!(matches!(
        v.verify(&confused),
        Err(TokenError::AlgorithmNotAllowed(_))
    ));
    // Without a JWK set, asymmetric tokens are refused.
    assert!(matches!(
        hs256().verify(&rs),
        Err(TokenError::AlgorithmNotAllowed(_))
    ));
}

#[test]
fn a_single_key_set_serves_tokens_without_kid() {
    let set: Value = serde_json::from_slice(&data("jwks.json")).unwrap();
    let mut one = set["keys"][1].clone();
    one.as_object_mut().unwrap().remove("kid");
    let jwks = serde_json::to_vec(&json!({"keys": [one]})).unwrap();
    let v = JwtVerifier::new().with_jwks(&jwks).unwrap();
    let t = sign_with(Algorithm::ES256, None, "ec.pem", &claims(json!("u")));
    v.verify(&t).unwrap();
}

#[test]
fn unusable_key_material_is_refused_by_name() {
    let err = JwtVerifier::new().with_hs256_secret(b"short").unwrap_err();
    assert!(err.to_string().contains("5 bytes"), "{err}");
    let set: Value = serde_json::from_slice(&data("jwks.json")).unwrap();
    let keys = set["keys"].as_array().unwrap().clone();
    let jwks = |keys: Vec<Value>| serde_json::to_vec(&json!({ "keys": keys })).unwrap();
    let bad = |json: Vec<u8>| JwtVerifier::new().with_jwks(&json).unwrap_err().to_string();
    assert!(bad(b"{}".to_vec()).contains("not a JWK set"));
    assert!(bad(b"not json".to_vec()).contains("not a JWK set"));
    assert!(bad(jwks(vec![])).contains("no signing key"));
    let mut enc = keys[0].clone();
    enc["use"] = json!("enc");
    assert!(bad(jwks(vec![enc])).contains("no signing key"));
    let oct = json!({"kty": "oct", "kid": "s", "k": "c2VjcmV0"});
    assert!(bad(jwks(vec![oct])).contains("keys[0]: symmetric"));
    let twice = bad(jwks(vec![keys[0].clone(), keys[0].clone()]));
    assert!(
        twice.contains("keys[1]") && twice.contains("twice"),
        "{twice}"
    );
    let mut no_kid = keys[2].clone();
    no_kid.as_object_mut().unwrap().remove("kid");
    let e = bad(jwks(vec![keys[0].clone(), no_kid]));
    assert!(e.contains("keys[1]") && e.contains("kid"), "{e}");
    let mut wrong_alg = keys[1].clone();
    wrong_alg["alg"] = json!("RS256");
    assert!(bad(jwks(vec![wrong_alg])).contains("does not fit"));
    let mut p521 = keys[1].clone();
    p521["crv"] = json!("P-521");
    assert!(bad(jwks(vec![p521])).contains("not supported"));
}

#[test]
fn debug_output_holds_no_key_material() {
    let v = hs256().with_jwks(&data("jwks.json")).unwrap();
    let text = format!("{v:?}");
    assert!(!text.contains("an-hs256"), "{text}");
    let set: Value = serde_json::from_slice(&data("jwks.json")).unwrap();
    assert!(!text.contains(&set["keys"][0]["n"].as_str().unwrap()[..20]));
    assert!(text.contains("rsa-1"), "{text}");
}
