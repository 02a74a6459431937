//! Every key of today's files keeps working: the example file, the OpenAPI test's file and
//! the policy snippets the tests write resolve to the route policies recorded (a `Debug`
//! dump, or the fields named by the errors) in `tests/data/config/route_policies.snap`,
//! recorded before the route policy became one typed struct. `UPDATE_SNAPSHOT=1` rewrites it.

use super::*;

const BASE: &str = "upstream = \"http://127.0.0.1:3000\"\nstore = \"memory://\"\n";

/// The policy parts of the files and strings the tests use.
const SNIPPETS: &[&str] = &[
    "",
    "[defaults]\nlease_ttl = \"1s\"\n",
    "[defaults]\nlease_ttl = \"500ms\"\n[[routes]]\nroute = \"POST /short\"\nrecord_ttl = \"1s\"\n",
    "[defaults]\nrecord_ttl = \"1h\"\nrecord_ttl_header = true\n[[routes]]\nroute = \"POST /a\"\n",
    "[defaults]\nlease_ttl = \"1s\"\nlease_expired = \"takeover\"\n",
    "[defaults]\nlease_ttl = \"1s\"\nlease_expired = \"fail\"\n",
    "[defaults]\nlease_ttl = \"2s\"\n[[routes]]\nroute = \"POST /accounts/{id}/refunds\"\nkey_required = true\nmismatch_status = 400\nprincipal = \"header:x-user-id\"\n",
    "[defaults]\nmax_body_bytes = 1000\n[[routes]]\nroute = \"POST /a\"\nmax_decoded_body_bytes = 1500\n[[routes]]\nroute = \"POST /b\"\nmax_body_bytes = 300\n",
    "[defaults]\nrecord_ttl = \"1h\"\nkey_required = true\nfail_open = true\n[[routes]]\nroute = \"POST  /a\"\nlease_ttl = \"30s\"\n",
    "[defaults]\ntrailing_slash = \"same\"\nencoded_slash = \"keep\"\ncase_insensitive = true\n[[routes]]\nroute = \"POST /charges\"\ntrailing_slash = \"refuse\"\n[[routes]]\nroute = \"POST /projects/{id}\"\nencoded_slash = \"refuse\"\ncase_insensitive = false\n",
    "[defaults]\nstore_statuses = [\"2xx\", \"409\"]\nrelease_statuses = [\"503\"]\nfail_statuses = [\"5xx\", \"404\"]\nignore_json_pointers = [\"/client_ts\", \"/meta/trace_id\"]\nfingerprint_headers = [\"x-tenant\"]\nreplay_deny_headers = [\"x-request-id\"]\nallow_anonymous = true\nretry_failed = true\nmax_stored_response_bytes = 2048\n",
    "[defaults]\nmax_in_flight_per_principal = 2\nnew_keys_per_second_per_principal = 0.5\nnew_keys_burst_per_principal = 3\n[[routes]]\nroute = \"POST /x\"\nnew_keys_per_second_per_principal = 5\n[[routes]]\nroute = \"PUT /y/{*rest}\"\nmax_in_flight_per_principal = 0\nnew_keys_per_second_per_principal = 0\nnew_keys_burst_per_principal = 0\n",
    "[defaults]\nmax_lease = \"5m\"\nmax_decoded_body_bytes = 77\n[[routes]]\nroute = \"PATCH /z\"\nmax_body_bytes = 10\n",
    // Errors: the fields named.
    "[defaults]\nrecord_ttl = \"1 fortnight\"\nmismatch_status = 409\n[[routes]]\nroute = \"POST payments\"\n[[routes]]\nroute = \"POST /refunds\"\nrelease_statuses = [\"6xx\"]\nprincipal = \"cookie\"\n",
    "[defaults]\nlease_ttl = \"forever\"\n[[routes]]\nroute = \"POST /p\"\nmismatch_status = 418\n",
    "[defaults]\nlease_expired = \"retry\"\nprincipal = \"jwt:\"\n",
    "[defaults]\ntrailing_slash = \"strip\"\n[[routes]]\nroute = \"POST /charges\"\nencoded_slash = \"allow\"\ncase_insensitive = true\n",
    "[defaults]\nlease_ttl = \"10ms\"\nrecord_ttl = \"5ms\"\n[[routes]]\nroute = \"POST /a\"\n",
    "[defaults]\nignore_json_pointers = [\"client_ts\"]\nfingerprint_headers = [\"bad header\"]\nmax_stored_response_bytes = 999999999999\n[[routes]]\nroute = \"POST /a\"\nmax_decoded_body_bytes = 0\nnew_keys_burst_per_principal = 3\n[[routes]]\nroute = \"POST /b\"\nnew_keys_per_second_per_principal = -1\n",
    "[[routes]]\nroute = \"POST /a\"\n[[routes]]\nroute = \"POST  /a\"\n[[routes]]\nkey_required = true\n[[routes]]\nroute = \"POST /{id\"\nprincipal = \"jwt:sub\"\n",
    "[defaults]\nroute = \"POST /x\"\n",
    // A status an earlier list already matches (503 released, not failed: run again).
    "[[routes]]\nroute = \"POST /charges\"\nfail_statuses = [\"5xx\", \"503\"]\n",
];

fn dump(text: &str) -> String {
    match Config::from_toml(text)
        .map_err(|e| vec![e.to_string()])
        .and_then(|c| c.validate())
    {
        Ok(v) => {
            let mut out = format!("default: {:?}\n", v.base.policy.default_route());
            for (route, p) in v.base.policy.routes() {
                out += &format!("{route}: {p:?}\n");
            }
            out
        }
        Err(errs) => {
            let mut fields: Vec<&str> = errs
                .iter()
                .map(|e| e.split(':').next().unwrap_or(e).trim_matches('`'))
                .collect();
            fields.sort();
            format!("errors: {fields:?}\n")
        }
    }
}

#[test]
fn every_key_of_todays_files_resolves_as_before() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut texts = vec![
        std::fs::read_to_string(root.join("../../docs/gateway.example.toml")).unwrap(),
        std::fs::read_to_string(root.join("tests/data/openapi/gateway.toml")).unwrap(),
    ];
    texts.extend(SNIPPETS.iter().map(|s| format!("{BASE}{s}")));
    let got: String = texts
        .iter()
        .enumerate()
        .map(|(i, t)| format!("## case {i}\n{}", dump(t)))
        .collect();
    let snap = root.join("tests/data/config/route_policies.snap");
    if std::env::var_os("UPDATE_SNAPSHOT").is_some() {
        std::fs::write(&snap, &got).unwrap();
    }
    let want = std::fs::read_to_string(&snap).unwrap();
    for (g, w) in got.lines().zip(want.lines()) {
        assert_eq!(g, w);
    }
    assert_eq!(got.lines().count(), want.lines().count());
}
