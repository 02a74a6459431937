//! The differential path test (issue 20, item 1): the same spellings of two resources'
//! paths, sent byte for byte to three real upstreams (Flask/Werkzeug under gunicorn, Express
//! on Node.js, Go's `net/http` `ServeMux`), first directly and then through the real
//! `idemgate` binary with a `[[routes]]` entry `POST /charges` (`key_required = true`).
//! Each upstream counts executions per resource as its router routed them, and records the
//! target of every POST it receives.
//!
//! With one key, principal and body, every spelling that an upstream executes as a resource
//! must reach that resource's scope (a replay, or `422` when the forwarded path differs) or
//! be refused with `400 ambiguous-path`, nothing forwarded; so each resource executes at most
//! once per key. The spellings servers disagree on are refused whatever the upstream. Without
//! a key, no spelling that the upstream executes as `/charges` is forwarded.
//!
//! A spelling may carry a header field after ` +` (`/x/charges +script_name:/x`): one that
//! makes some upstream run another path (gunicorn strips a `SCRIPT_NAME` prefix, trusting
//! it from `127.0.0.1` by default) is refused with `400 ambiguous-request`.
//!
//! Each upstream runs with the settings its users should use: Flask and Go with the defaults
//! (they route case-sensitively and tell `/charges/` from `/charges`); Express with
//! `case_insensitive = true` on the route, since Express runs `POST /Charges` as `/charges`:
//! with the default `false`, `/Charges` is an unmatched path with a scope of its own, is
//! forwarded, and Express charges again. The direct view is printed as a table and compared
//! with what each pinned framework is known to do, so a version change shows.
//!
//! The upstreams come from `scripts/test.d/`: `python.sh` (Flask and gunicorn, pinned in
//! `scripts/requirements-test.txt`), `node.sh` (Express, `npm ci` of
//! `tests/upstreams/package-lock.json`) and `go.sh`. A test whose variable is unset says so
//! and skips.

mod upstreams;
mod wire;

use std::fmt::Write as _;

use crate::support::{key, run_idemgate, spawn_binary, Process};
use upstreams::Upstream;
use wire::Answer;

/// The two resources; each spelling is of one of them.
const CHARGES: &str = "/charges";
const A_CHARGES: &str = "/a/charges";

/// A spelling and whether the contract refuses it whatever the upstream (`//`, encoded `/`
/// or `\`, NUL, `;params`, a trailing slash under the default `trailing_slash =
/// "refuse"`, an `override_headers` field). Dot segments may be refused or normalised;
/// either way they share the scope.
const SPELLINGS: &[(&str, bool)] = &[
    (CHARGES, false),
    (A_CHARGES, false),
    ("//charges", true),
    ("/%2Fcharges", true),
    ("/%63harges", false),
    ("/charges/", true),
    ("/./charges", false),
    ("/a/../charges", false),
    ("/%2e/charges", false),
    ("/Charges", false),
    ("/charges;x=1", true),
    ("/charges%00", true),
    ("/a%2Fcharges", true),
    ("/a%2fcharges", true),
    ("/a%5Ccharges", true),
    (X_CHARGES_SCRIPT_NAME, true),
];

/// `/x/charges` with `SCRIPT_NAME: /x`: gunicorn runs `/charges`.
const X_CHARGES_SCRIPT_NAME: &str = "/x/charges +script_name:/x";

/// A spelling's request target and its extra header field (after ` +`, `name:value`).
fn request_of(spelling: &str) -> (&str, wire::Field<'_>) {
    match spelling.split_once(" +") {
        Some((target, field)) => (target, field.split_once(':')),
        None => (spelling, None),
    }
}

/// What an upstream executes, by spelling; every other spelling executes nothing there.
type Executes = &'static [(&'static str, &'static str)];

const FLASK: Executes = &[
    (CHARGES, CHARGES),
    (A_CHARGES, A_CHARGES),
    ("//charges", CHARGES),
    ("/%2Fcharges", CHARGES),
    ("/%63harges", CHARGES),
    ("/a%2Fcharges", A_CHARGES),
    ("/a%2fcharges", A_CHARGES),
    (X_CHARGES_SCRIPT_NAME, CHARGES),
];

const EXPRESS: Executes = &[
    (CHARGES, CHARGES),
    (A_CHARGES, A_CHARGES),
    ("/charges/", CHARGES),
    ("/Charges", CHARGES),
];

/// Go 1.19's `ServeMux` answers `301` to `//` and dot segments instead of running them.
const GO_MUX: Executes = &[
    (CHARGES, CHARGES),
    (A_CHARGES, A_CHARGES),
    ("/%63harges", CHARGES),
    ("/a%2Fcharges", A_CHARGES),
    ("/a%2fcharges", A_CHARGES),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flask_under_gunicorn_executes_each_resource_at_most_once_per_key() {
    let test = "flask_under_gunicorn_executes_each_resource_at_most_once_per_key";
    let Some(up) = upstreams::flask(test).await else {
        return;
    };
    differential("Flask", &up, FLASK, "").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn express_executes_each_resource_at_most_once_per_key() {
    let test = "express_executes_each_resource_at_most_once_per_key";
    let Some(up) = upstreams::express(test).await else {
        return;
    };
    // Express routes case-insensitively: its users fold case in the gateway too. A trailing
    // slash, which Express also ignores, stays refused (the default).
    differential("Express", &up, EXPRESS, "case_insensitive = true\n").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_servemux_executes_each_resource_at_most_once_per_key() {
    let test = "go_servemux_executes_each_resource_at_most_once_per_key";
    let Some(up) = upstreams::go_mux(test).await else {
        return;
    };
    differential("Go ServeMux", &up, GO_MUX, "").await;
}

/// One request and what the upstream saw of it.
#[derive(Debug)]
struct Seen {
    answer: Answer,
    /// Targets of the POSTs that reached the upstream meanwhile.
    arrived: Vec<String>,
    /// Resources executed meanwhile.
    executed: Vec<String>,
}

impl Seen {
    fn executed_as(&self) -> String {
        if self.executed.is_empty() {
            "-".into()
        } else {
            self.executed.join(" ")
        }
    }

    /// `400 ambiguous-path`, or `400 ambiguous-request` (an `override_headers` field).
    fn refused(&self) -> bool {
        self.answer.is_problem(400, "ambiguous-path")
            || self.answer.is_problem(400, "ambiguous-request")
    }

    /// The answer of a scope that already holds the key: its replay, or `422` when the
    /// fingerprint (which keeps the path as forwarded) differs.
    fn same_scope(&self) -> bool {
        self.answer.replayed || self.answer.is_problem(422, "fingerprint-mismatch")
    }
}

/// Sends `spelling` to `to` (the upstream itself or the gateway) and reads what `up` saw.
async fn observe(to: &str, up: &Upstream, spelling: &str, key: Option<&str>) -> Seen {
    let before = wire::counts(&up.addr).await;
    let answer = wire::send(to, "POST", request_of(spelling), key).await;
    let after = wire::counts(&up.addr).await;
    let mut executed = Vec::new();
    for (resource, n) in &after.executions {
        for _ in before.executed(resource)..*n {
            executed.push(resource.clone());
        }
    }
    Seen {
        answer,
        arrived: after.arrivals[before.arrivals.len()..].to_vec(),
        executed,
    }
}

/// Runs the three phases against `up` and fails with every broken expectation at once.
async fn differential(name: &str, up: &Upstream, expected: Executes, route_settings: &str) {
    let mut failures = Vec::new();
    let direct = direct_view(name, up, expected, &mut failures).await;
    let gateway = start_gateway(name, up, route_settings).await;
    let to = gateway.base.trim_start_matches("http://").to_owned();
    let k = key();
    let mut keyed = Vec::new();
    for (target, _) in SPELLINGS {
        keyed.push(observe(&to, up, target, Some(&k)).await);
    }
    let mut unkeyed = Vec::new();
    for (target, _) in SPELLINGS {
        unkeyed.push(observe(&to, up, target, None).await);
    }
    drop(gateway);
    print_gateway_table(name, route_settings, &keyed, &unkeyed);
    check_keyed(name, &direct, &keyed, &mut failures);
    check_unkeyed(name, &direct, &unkeyed, &mut failures);
    assert!(
        failures.is_empty(),
        "{name}: {} expectations failed:\n  {}\nupstream log:\n{}",
        failures.len(),
        failures.join("\n  "),
        up.log()
    );
}

/// Each spelling sent to the upstream itself, without a key: printed as a table, checked to
/// arrive byte for byte and to execute what the framework is known to execute.
async fn direct_view(
    name: &str,
    up: &Upstream,
    expected: Executes,
    failures: &mut Vec<String>,
) -> Vec<Seen> {
    let server = wire::counts(&up.addr).await.server;
    let mut table = format!("\n{name} ({server}), directly, no gateway:\n");
    writeln!(
        table,
        "  {:<28} {:<28} {:<12} received",
        "spelling", "answer", "executed as"
    )
    .unwrap();
    let mut seen = Vec::new();
    for (target, _) in SPELLINGS {
        let s = observe(&up.addr, up, target, None).await;
        let received = s.arrived.join(" ");
        writeln!(
            table,
            "  {target:<28} {:<28} {:<12} {received}",
            s.answer.short(),
            s.executed_as()
        )
        .unwrap();
        if s.arrived != [request_of(target).0.to_string()] {
            failures.push(format!(
                "direct {target}: the upstream received {:?}",
                s.arrived
            ));
        }
        let known = expected.iter().find(|(t, _)| t == target).map(|(_, r)| *r);
        if s.executed != known.into_iter().map(str::to_owned).collect::<Vec<_>>() {
            failures.push(format!(
                "direct {target}: {name} executed [{}], known to execute [{}] \
                 (a framework change? review this test's table)",
                s.executed_as(),
                known.unwrap_or("-")
            ));
        }
        seen.push(s);
    }
    println!("{table}");
    seen
}

/// The gateway's configuration before a route's own settings.
const CONFIG: &str = r#"store = "memory://"

[[routes]]
route = "POST /charges"
key_required = true
"#;

/// The real binary on the in-memory store with [`CONFIG`] plus `route_settings`, after
/// `idemgate config check` accepts the file.
async fn start_gateway(name: &str, up: &Upstream, route_settings: &str) -> Process {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.toml");
    let toml = format!("{CONFIG}{route_settings}");
    std::fs::write(&config, &toml).unwrap();
    let args: [&std::ffi::OsStr; 3] = ["config".as_ref(), "check".as_ref(), config.as_os_str()];
    let (code, out) = run_idemgate(&args);
    assert_eq!(
        code, 0,
        "{name}: the gateway refuses the configuration its users need:\n{toml}\n{out}"
    );
    spawn_binary(&up.base(), &config).await
}

fn print_gateway_table(name: &str, route_settings: &str, keyed: &[Seen], unkeyed: &[Seen]) {
    let settings = match route_settings.trim() {
        "" => "default settings".to_owned(),
        s => s.replace('\n', ", "),
    };
    let mut table = format!("\n{name} through the gateway ({settings}; one key, then no key):\n");
    writeln!(
        table,
        "  {:<28} {:<28} {:<12} | {:<28} executed as",
        "spelling", "with the key", "executed as", "without a key"
    )
    .unwrap();
    for (((target, _), k), u) in SPELLINGS.iter().zip(keyed).zip(unkeyed) {
        writeln!(
            table,
            "  {target:<28} {:<28} {:<12} | {:<28} {}",
            k.answer.short(),
            k.executed_as(),
            u.answer.short(),
            u.executed_as()
        )
        .unwrap();
    }
    println!("{table}");
}

/// With one key: refused or same-scope answers forwarded nothing; the spellings servers
/// disagree on are refused; a spelling the upstream executes shares its resource's scope or
/// is refused; each resource executed once.
fn check_keyed(name: &str, direct: &[Seen], keyed: &[Seen], failures: &mut Vec<String>) {
    for (((target, ambiguous), d), s) in SPELLINGS.iter().zip(direct).zip(keyed) {
        let answer = s.answer.short();
        // Refused, or answered from the scope the canonical spelling filled.
        let held = s.refused() || s.same_scope();
        if held && !s.arrived.is_empty() {
            failures.push(format!(
                "{target} with the key: answered {answer}, yet forwarded"
            ));
        }
        if *ambiguous && !s.refused() {
            failures.push(format!(
                "{target} with the key: answered {answer}, not refused (400 ambiguous-path or ambiguous-request)"
            ));
        }
        let variant = ![CHARGES, A_CHARGES].contains(target);
        if variant && !d.executed.is_empty() && !held {
            failures.push(format!(
                "{target} with the key: {name} executes it as {}, but the gateway gave it \
                 a scope of its own ({answer}, executed {})",
                d.executed_as(),
                s.executed_as()
            ));
        }
    }
    for resource in [CHARGES, A_CHARGES] {
        let n = keyed
            .iter()
            .flat_map(|s| &s.executed)
            .filter(|r| *r == resource)
            .count();
        if n != 1 {
            failures.push(format!(
                "{resource} executed {n} times with one key (expected once)"
            ));
        }
    }
}

/// Without a key: nothing executes `/charges`, and a spelling the upstream executes as
/// `/charges` is refused (`missing-key` or `ambiguous-path`) and not forwarded.
fn check_unkeyed(name: &str, direct: &[Seen], unkeyed: &[Seen], failures: &mut Vec<String>) {
    for (((target, _), d), s) in SPELLINGS.iter().zip(direct).zip(unkeyed) {
        let answer = s.answer.short();
        if s.executed.iter().any(|r| r == CHARGES) {
            failures.push(format!(
                "{target} without a key: {name} executed /charges (key_required escaped; {answer})"
            ));
        }
        if d.executed.iter().any(|r| r == CHARGES) {
            let refused = s.answer.is_problem(400, "missing-key") || s.refused();
            if !refused || !s.arrived.is_empty() {
                failures.push(format!(
                    "{target} without a key: {name} executes it as /charges, but the gateway \
                     answered {answer} and forwarded {:?}",
                    s.arrived
                ));
            }
        }
    }
}
