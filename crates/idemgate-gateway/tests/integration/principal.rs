//! Principal sources through the gateway: one caller per request, and a verified JWT claim
//! that survives token refresh. Keys are the test-only ones in `tests/data/jwt`.

use idemgate_gateway::config::JwtConfig;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

use crate::support::*;

const ISSUER: &str = "https://auth.example.com";
const AUDIENCE: &str = "payments-api";

fn data(name: &str) -> String {
    format!("{}/tests/data/jwt/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn now() -> i64 {
    jsonwebtoken::get_current_timestamp() as i64
}

/// Valid claims for `sub`, issued `age` seconds ago, living an hour.
fn claims(sub: &str, age: i64) -> Value {
    json!({"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "iat": now() - age,
           "exp": now() - age + 3600, "jti": key()})
}

fn hs256(claims: &Value) -> String {
    let secret = std::fs::read(data("hs256.secret")).unwrap();
    encode(
        &Header::default(),
        claims,
        &EncodingKey::from_secret(&secret),
    )
    .unwrap()
}

fn signed(alg: Algorithm, kid: &str, pem: &str, claims: &Value) -> String {
    let pem = std::fs::read(data(pem)).unwrap();
    let key = match alg {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(&pem).unwrap(),
        Algorithm::ES256 => EncodingKey::from_ec_pem(&pem).unwrap(),
        _ => EncodingKey::from_ed_pem(&pem).unwrap(),
    };
    let mut header = Header::new(alg);
    header.kid = Some(kid.into());
    encode(&header, claims, &key).unwrap()
}

async fn jwt_gateway(up: &Upstream) -> Gateway {
    gateway(&up.base, "memory://", |c| {
        c.defaults.set("principal", "jwt:sub");
        c.jwt = Some(JwtConfig {
            hs256_secret_file: Some(data("hs256.secret")),
            jwks_file: Some(data("jwks.json")),
            issuer: Some(ISSUER.into()),
            audience: Some(AUDIENCE.into()),
            leeway: "30s".into(),
        });
    })
    .await
}

async fn send(gw: &Gateway, k: &str, token: &str) -> reqwest::Response {
    client()
        .post(format!("{}/payments", gw.base))
        .header("idempotency-key", k)
        .header("authorization", format!("Bearer {token}"))
        .body("{\"amount\":100}")
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_repeated_or_listed_principal_header_is_400_and_nothing_is_forwarded() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |c| {
        c.defaults.set("principal", "header:x-user-id")
    })
    .await;
    let k = key();
    let first = post(&gw.base, "/payments", Some(&k), "{}")
        .header("x-user-id", "alice")
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 201);
    // An auth layer that appends instead of replacing: bob's request names alice too.
    let appended = post(&gw.base, "/payments", Some(&k), "{}")
        .header("x-user-id", "alice")
        .header("x-user-id", "bob")
        .send()
        .await
        .unwrap();
    let body = assert_problem(appended, 400, "ambiguous-principal").await;
    assert!(body["detail"].as_str().unwrap().contains("x-user-id"));
    let listed = post(&gw.base, "/payments", Some(&k), "{}")
        .header("x-user-id", "alice, bob")
        .send()
        .await
        .unwrap();
    assert_problem(listed, 400, "ambiguous-principal").await;
    let other = post(&gw.base, "/payments", Some(&key()), "{}")
        .header("x-user-id", "bob,alice")
        .send()
        .await
        .unwrap();
    assert_problem(other, 400, "ambiguous-principal").await;
    assert_eq!(up.count(), 1, "only alice's first request was forwarded");
}

#[tokio::test]
async fn a_refreshed_token_of_the_same_subject_replays() {
    let up = upstream().await;
    let gw = jwt_gateway(&up).await;
    let k = key();
    let first = send(&gw, &k, &hs256(&claims("user_1", 3000))).await;
    assert_eq!(first.status(), 201);
    let first: Value = first.json().await.unwrap();
    // The access token was refreshed: new iat/exp/jti, another key type even.
    let refreshed = signed(Algorithm::RS256, "rsa-1", "rsa.pem", &claims("user_1", 0));
    let retry = send(&gw, &k, &refreshed).await;
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.json::<Value>().await.unwrap(), first);
    assert_eq!(up.count(), 1);
    // Same key, another subject: its own scope, so it runs.
    let other = send(&gw, &k, &hs256(&claims("user_2", 0))).await;
    assert_eq!(other.status(), 201);
    assert!(other.headers().get("idempotent-replayed").is_none());
    assert_eq!(up.count(), 2);
}

#[tokio::test]
async fn jwks_tokens_verify_by_kid() {
    let up = upstream().await;
    let gw = jwt_gateway(&up).await;
    for (alg, kid, pem) in [
        (Algorithm::RS256, "rsa-1", "rsa.pem"),
        (Algorithm::ES256, "ec-1", "ec.pem"),
        (Algorithm::EdDSA, "ed-1", "ed25519.pem"),
    ] {
        let token = signed(alg, kid, pem, &claims(&format!("{kid}-user"), 0));
        assert_eq!(send(&gw, &key(), &token).await.status(), 201, "{kid}");
    }
    assert_eq!(up.count(), 3);
}

#[tokio::test]
async fn refused_tokens_are_401_and_nothing_is_forwarded() {
    use base64::Engine as _;
    let up = upstream().await;
    let gw = jwt_gateway(&up).await;
    let b64 = |v: &Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
    };
    let with = |field: &str, value: Value| {
        let mut c = claims("user_1", 0);
        c[field] = value;
        c
    };
    let forged = encode(
        &Header::default(),
        &claims("user_1", 0),
        &EncodingKey::from_secret(b"not-the-configured-secret-at-all!!"),
    )
    .unwrap();
    let mut no_sub = claims("user_1", 0);
    no_sub.as_object_mut().unwrap().remove("sub");
    let cases: Vec<(&str, String)> = vec![
        ("bad signature", forged),
        (
            "other issuer",
            hs256(&with("iss", json!("https://evil.example"))),
        ),
        ("other audience", hs256(&with("aud", json!("ledger-api")))),
        (
            "alg none",
            format!(
                "{}.{}.",
                b64(&json!({"alg": "none"})),
                b64(&claims("user_1", 0))
            ),
        ),
        ("expired", hs256(&with("exp", json!(now() - 120)))),
        ("not yet valid", hs256(&with("nbf", json!(now() + 600)))),
        ("no sub", hs256(&no_sub)),
        (
            "ES256 key under the RSA kid",
            signed(Algorithm::ES256, "rsa-1", "ec.pem", &claims("user_1", 0)),
        ),
        (
            "unknown kid",
            signed(Algorithm::RS256, "rsa-9", "rsa.pem", &claims("user_1", 0)),
        ),
        ("garbage", "not.a.jwt".into()),
    ];
    for (what, token) in cases {
        let resp = send(&gw, &key(), &token).await;
        assert_eq!(
            resp.headers()
                .get("www-authenticate")
                .map(|v| v.to_str().unwrap()),
            Some("Bearer error=\"invalid_token\""),
            "{what}"
        );
        let body = assert_problem(resp, 401, "invalid-token").await;
        println!("{what}: {}", body["detail"]);
    }
    let basic = client()
        .post(format!("{}/payments", gw.base))
        .header("idempotency-key", key())
        .header("authorization", "Basic dXNlcjpwdw==")
        .send()
        .await
        .unwrap();
    assert_problem(basic, 401, "invalid-token").await;
    let missing = client()
        .post(format!("{}/payments", gw.base))
        .header("idempotency-key", key())
        .send()
        .await
        .unwrap();
    assert_problem(missing, 401, "missing-principal").await;
    assert_eq!(up.count(), 0, "the upstream saw nothing");
}

/// `idemgate inspect --authorization "Bearer …"` finds a caller's records by the principal
/// source the configuration gives the route (here `jwt:sub`), also with a refreshed token.
#[tokio::test]
async fn inspect_finds_a_jwt_callers_records_by_their_token() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("jwt.db").display());
    let file = dir.path().join("gateway.toml");
    std::fs::write(
        &file,
        format!(
            "upstream = \"{}\"\nstore = \"{store}\"\n[defaults]\nprincipal = \"jwt:sub\"\n\
             [jwt]\nhs256_secret_file = \"{}\"\nissuer = \"{ISSUER}\"\naudience = \"{AUDIENCE}\"\n",
            up.base,
            data("hs256.secret")
        ),
    )
    .unwrap();
    let gw = gateway(&up.base, &store, |c| {
        c.defaults.set("principal", "jwt:sub");
        c.jwt = Some(JwtConfig {
            hs256_secret_file: Some(data("hs256.secret")),
            jwks_file: None,
            issuer: Some(ISSUER.into()),
            audience: Some(AUDIENCE.into()),
            leeway: "30s".into(),
        });
    })
    .await;
    let k = key();
    assert_eq!(
        send(&gw, &k, &hs256(&claims("user_9", 0))).await.status(),
        201
    );
    let inspect = |token: String| {
        std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .arg("inspect")
            .arg("--config")
            .arg(&file)
            .args([
                "--key",
                &k,
                "--authorization",
                &format!("Bearer {token}"),
                "--json",
            ])
            .output()
            .unwrap()
    };
    let out = inspect(hs256(&claims("user_9", 10)));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["records"].as_array().unwrap().len(), 1, "{listed}");
    assert!(listed["records"][0]["principal"]
        .as_str()
        .unwrap()
        .starts_with("jwt:sub:"));
    let other = inspect(hs256(&claims("user_10", 0)));
    let listed: Value = serde_json::from_slice(&other.stdout).unwrap_or(Value::Null);
    assert!(
        listed["records"].as_array().is_none_or(|r| r.is_empty()),
        "another subject sees nothing: {listed}"
    );
    let bad = inspect("not-a-token".into());
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--authorization"));
    gw.stop().await;
}
