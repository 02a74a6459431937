//! What the probe found: a verdict per scenario, the whole report as a table or as JSON
//! (`{"passed": bool, "requests": n, "incomplete": null | "why", "scenarios": [{"name",
//! "rule", "status", "required", "detail"}]}`).

use std::fmt::Write as _;

use serde::Serialize;

use crate::http::Exchange;

/// What one scenario found.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// The API kept the rule; what was seen.
    Passed(String),
    /// The API broke the rule: what went wrong and the exchanges that show it.
    Failed(String, Vec<Exchange>),
    /// Not run: why (an option not given, the request budget spent, not in the profile).
    Skipped(String),
}

impl Verdict {
    /// A failure shown by `exchanges`.
    pub fn failed(detail: impl Into<String>, exchanges: &[&Exchange]) -> Self {
        Self::Failed(
            detail.into(),
            exchanges.iter().map(|e| (*e).clone()).collect(),
        )
    }
}

/// `status` of a scenario in the JSON output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The rule held.
    Passed,
    /// The rule was broken.
    Failed,
    /// Not run.
    Skipped,
}

/// One scenario's line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioReport {
    /// The scenario's name (`replay-same-request`).
    pub name: &'static str,
    /// The rule it checks and where the rule comes from.
    pub rule: &'static str,
    /// What happened.
    pub status: Status,
    /// Whether the profile requires it: a failed required scenario fails the probe.
    pub required: bool,
    /// What was seen; for a failure, also the exchanges that broke the rule.
    pub detail: String,
}

impl ScenarioReport {
    /// The line of `verdict` for the scenario `name` checking `rule`.
    pub fn new(name: &'static str, rule: &'static str, required: bool, verdict: Verdict) -> Self {
        let (status, detail) = match verdict {
            Verdict::Passed(d) => (Status::Passed, d),
            Verdict::Skipped(d) => (Status::Skipped, d),
            Verdict::Failed(d, exchanges) => {
                let mut detail = d;
                for (i, e) in exchanges.iter().enumerate() {
                    let _ = write!(detail, "\n  exchange {}:\n{e}", i + 1);
                }
                (Status::Failed, detail)
            }
        };
        Self {
            name,
            rule,
            status,
            required,
            detail,
        }
    }
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Whether the run finished and every scenario the profile requires passed (skipped
    /// ones do not fail it).
    pub passed: bool,
    /// Requests sent to the target.
    pub requests: usize,
    /// Why the run could not finish (`--timeout` passed, the first request got no answer);
    /// `null` when it finished. An incomplete run exits with 2.
    pub incomplete: Option<String>,
    /// Every scenario, in the order run.
    pub scenarios: Vec<ScenarioReport>,
}

impl Report {
    /// The report of `scenarios`, after `requests` requests; `incomplete` says why the
    /// run could not finish.
    pub fn new(
        scenarios: Vec<ScenarioReport>,
        requests: usize,
        incomplete: Option<String>,
    ) -> Self {
        // An incomplete run proves nothing: a CI job reading `passed` alone never sees it
        // as a success.
        let passed = incomplete.is_none()
            && !scenarios
                .iter()
                .any(|s| s.required && s.status == Status::Failed);
        Self {
            passed,
            requests,
            incomplete,
            scenarios,
        }
    }

    /// The scenario called `name`.
    pub fn scenario(&self, name: &str) -> Option<&ScenarioReport> {
        self.scenarios.iter().find(|s| s.name == name)
    }

    /// The report as a table: a line per scenario (status, name, what was seen), then each
    /// failure with its rule and exchanges, then the totals.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let width = self
            .scenarios
            .iter()
            .map(|s| s.name.len())
            .max()
            .unwrap_or(0);
        for s in &self.scenarios {
            let mark = match (s.status, s.required) {
                (Status::Passed, _) => "pass",
                (Status::Failed, true) => "FAIL",
                (Status::Failed, false) => "warn",
                (Status::Skipped, _) => "skip",
            };
            let first = s.detail.lines().next().unwrap_or("");
            let _ = writeln!(out, "{mark}  {:width$}  {first}", s.name);
        }
        for s in self.scenarios.iter().filter(|s| s.status == Status::Failed) {
            let kind = if s.required {
                "failed"
            } else {
                "failed (not required by the profile)"
            };
            let _ = writeln!(
                out,
                "\n{} {kind}\n  rule: {}\n  {}",
                s.name, s.rule, s.detail
            );
        }
        let count = |st, required| {
            let of = |s: &&ScenarioReport| s.status == st && (required || !s.required);
            self.scenarios.iter().filter(of).count()
        };
        let _ = writeln!(
            out,
            "\n{} passed, {} failed, {} warnings, {} skipped; {} requests sent; {}",
            count(Status::Passed, true),
            count(Status::Failed, true) - count(Status::Failed, false),
            count(Status::Failed, false),
            count(Status::Skipped, true),
            self.requests,
            match (&self.incomplete, self.passed) {
                (Some(why), _) => format!("incomplete: {why}"),
                (None, true) => "the contract holds".to_owned(),
                (None, false) => "the contract is broken".to_owned(),
            }
        );
        out
    }
}
