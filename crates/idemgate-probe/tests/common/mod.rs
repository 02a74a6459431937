//! What the probe's tests share: options from command-line words, a run, and a failed
//! scenario's detail.
#![allow(dead_code)]

use clap::Parser;
use idemgate_probe::{ProbeArgs, Report, Status};

pub(crate) mod flawed_api;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    probe: ProbeArgs,
}

/// The probe's options from command-line words, with the demo's body in `dir`.
pub(crate) fn args(dir: &tempfile::TempDir, url: &str, extra: &[&str]) -> ProbeArgs {
    let body = dir.path().join("req.json");
    std::fs::write(&body, r#"{"amount": 1000, "currency": "EUR"}"#).unwrap();
    let mut words = vec!["probe", url, "--body-file", body.to_str().unwrap()];
    words.extend(["-H", "Authorization: Bearer alice"]);
    if !extra.contains(&"--id-pointer") {
        words.extend(["--id-pointer", "/id"]);
    }
    words.extend_from_slice(extra);
    Cli::parse_from(words).probe
}

pub(crate) async fn probe(args: &ProbeArgs) -> Report {
    idemgate_probe::run(&args.resolve().unwrap(), None, |_| {})
        .await
        .unwrap()
}

pub(crate) fn failed<'a>(report: &'a Report, name: &str) -> &'a str {
    let s = report
        .scenario(name)
        .unwrap_or_else(|| panic!("no scenario {name}"));
    assert_eq!(s.status, Status::Failed, "{name}: {}", s.detail);
    assert!(s.required, "{name}");
    assert!(report
        .table()
        .contains(&format!("{name} failed\n  rule: {}", s.rule)));
    &s.detail
}
