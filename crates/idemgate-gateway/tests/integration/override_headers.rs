//! Headers that make an upstream run another path or method than the gateway scoped
//! (`override_headers`): gunicorn strips a client-sent `SCRIPT_NAME` prefix from the path,
//! method-override middleware runs a POST as the method it names. A covered request
//! carrying one is refused with `400 ambiguous-request` and never forwarded, keyed or not;
//! `override_headers = []` forwards them.

use idemgate_gateway::config::{Config, RouteTable};

use crate::support::*;

/// A gateway in front of `up` whose only route is `POST /charges`, requiring a key.
async fn charges_gateway(up: &Upstream, edit: impl FnOnce(&mut Config)) -> Gateway {
    gateway(&up.base, "memory://", |c| {
        c.routes = vec![RouteTable::route("POST /charges").with("key_required", true)];
        edit(c);
    })
    .await
}

/// The requests an upstream would run as another (method, path): `(path, header, value)`.
const OVERRIDES: [(&str, &str, &str); 3] = [
    ("/x/charges", "SCRIPT_NAME", "/x"),
    ("/charges", "X-HTTP-Method-Override", "PATCH"),
    ("/charges", "X-Original-URL", "/charges"),
];

#[tokio::test]
async fn path_and_method_overrides_are_refused_and_never_forwarded() {
    let up = upstream().await;
    let gw = charges_gateway(&up, |_| {}).await;
    let k = key();
    let first = post(&gw.base, "/charges", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 201);
    for (path, name, value) in OVERRIDES {
        // The same key and body: gunicorn would run `/charges` again (a double charge);
        // without a key it would escape `key_required`.
        for key in [Some(k.as_str()), None] {
            let resp = post(&gw.base, path, key, "{}")
                .header(name, value)
                .send()
                .await
                .unwrap();
            let problem = assert_problem(resp, 400, "ambiguous-request").await;
            let detail = problem["detail"].as_str().unwrap();
            assert!(detail.contains(&name.to_ascii_lowercase()), "{detail}");
        }
    }
    assert_eq!(up.count(), 1, "no override reached the upstream");
    gw.stop().await;
}

#[tokio::test]
async fn override_headers_empty_forwards_them() {
    let up = upstream().await;
    let gw = charges_gateway(&up, |c| c.override_headers.clear()).await;
    for (n, (path, name, value)) in OVERRIDES.into_iter().enumerate() {
        let resp = post(&gw.base, path, Some(&key()), "{}")
            .header(name, value)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201, "{name}");
        assert_eq!(up.count(), n + 1);
        assert_eq!(up.last_headers()[name], value, "forwarded as sent");
    }
    gw.stop().await;
}

#[test]
fn override_headers_are_validated_as_header_names() {
    let text = "upstream = \"http://127.0.0.1:3000\"\n\
                override_headers = [\"x bad\", \"idempotency-key\", \"SCRIPT_NAME\"]\n";
    let errs = Config::from_toml(text).unwrap().validate().unwrap_err();
    let all = errs.join("\n");
    assert!(
        all.contains("override_headers: `x bad` is not a header name"),
        "{all}"
    );
    assert!(
        all.contains("override_headers: `idempotency-key` is the key header"),
        "{all}"
    );
    assert_eq!(errs.len(), 2, "`SCRIPT_NAME` is a header name: {all}");
    let default = Config::default().override_headers;
    assert!(default.contains(&"script_name".to_owned()), "{default:?}");
}
