//! The scenarios: each sends a few crafted requests with keys of its own and judges the
//! answers against one rule of the contract. An execution is told apart by the resource id
//! in the answer ([`Probe::id`]): two ids for one key mean the operation ran twice.

use std::time::Duration;

use tokio::time::Instant;

use futures_util::future::BoxFuture;

use crate::http::{Exchange, Request};
use crate::options::Profile;
use crate::probe::{success, Probe, Ran};
use crate::report::{ScenarioReport, Verdict};

mod concurrency;
mod edges;
mod kept;
mod keys;
mod replay;
mod scope;

/// The first wait before a request answered `409` is sent again ([`settled`]).
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// How the `ietf` profile (draft-07) treats a scenario; the `idemgate` profile requires
/// every one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ietf {
    /// A rule of the draft: a failure fails the probe.
    Required,
    /// Good practice the draft does not demand: run and reported, never failing the probe.
    Advisory,
    /// Not a rule of the draft (idemgate's key syntax, JSON canonicalisation): skipped.
    NotARule,
}

/// A scenario's run.
pub type Run = fn(&Probe) -> BoxFuture<'_, Verdict>;

/// One scenario.
#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    /// Its name, e.g. `replay-same-request`.
    pub name: &'static str,
    /// The rule it checks and its source.
    pub rule: &'static str,
    /// How `--profile ietf` treats it.
    pub ietf: Ietf,
    /// Most requests it sends (for `concurrency`, per duplicate sent at once: see
    /// [`Scenario::cost`]).
    cost: usize,
    /// Whether `cost` is per duplicate of the concurrency scenario.
    per_duplicate: bool,
    /// A scenario that must have passed for this one to prove anything (run before it).
    needs: Option<&'static str>,
    run: Run,
}

impl Scenario {
    /// Most requests it sends under `probe`'s options.
    pub fn cost(&self, probe: &Probe) -> usize {
        match self.per_duplicate {
            true => self.cost * probe.opts.concurrency + 1,
            false => self.cost,
        }
    }
}

/// A scenario of `cost` requests at most.
macro_rules! scenario {
    ($name:literal, $ietf:ident, $cost:expr, $f:path, $rule:literal) => {{
        fn run(
            p: &crate::probe::Probe,
        ) -> futures_util::future::BoxFuture<'_, crate::report::Verdict> {
            Box::pin($f(p))
        }
        $crate::scenarios::Scenario {
            name: $name,
            rule: $rule,
            ietf: $crate::scenarios::Ietf::$ietf,
            cost: $cost,
            per_duplicate: false,
            needs: None,
            run,
        }
    }};
}
pub(crate) use scenario;

/// Every scenario, in the order run. The first ([`FIRST`]) is the baseline: when the API
/// does not answer a keyed request with `2xx` and an id, nothing else can be judged.
pub fn all() -> Vec<Scenario> {
    let mut all = vec![keys::first()];
    all.extend(keys::all());
    all.extend(replay::all());
    all.push(concurrency::duplicates());
    all.push(concurrency::keys());
    all.push(concurrency::disconnect());
    all.extend(scope::all());
    let mut edges = edges::all();
    // The key's lifetime waits longest: last, after the records of every key run so far
    // were checked within their lifetime.
    let lifetime = edges.pop();
    all.extend(edges);
    all.push(kept::kept());
    all.extend(lifetime);
    all
}

/// The baseline scenario's name.
pub const FIRST: &str = "first-request";

/// What a run of the scenarios found: a line per scenario, and why the run could not
/// finish, if it could not (`--timeout` passed, or the first request got no answer).
#[derive(Debug)]
pub struct Outcome {
    /// Every scenario's line, in the order run.
    pub reports: Vec<ScenarioReport>,
    /// Why the run is incomplete; `None` when every scenario ran or was skipped for a
    /// reason of its own.
    pub incomplete: Option<String>,
}

/// Runs `scenarios` against `probe`, telling `progress` each one's name before it runs,
/// within `--timeout`.
pub async fn run(probe: &Probe, scenarios: &[Scenario], progress: impl Fn(&str)) -> Outcome {
    let deadline = tokio::time::Instant::now() + probe.opts.timeout;
    let mut reports = Vec::with_capacity(scenarios.len());
    // Why no further scenario runs: the baseline failed, the API stopped, --timeout passed.
    let mut stopped: Option<String> = None;
    let mut incomplete = None;
    for s in scenarios {
        progress(s.name);
        let required = match probe.profile() {
            Profile::Idemgate => true,
            Profile::Ietf => s.ietf == Ietf::Required,
        };
        if required && incomplete.is_none() && !probe.affords(s.cost(probe)) {
            // A required rule left unchecked for the budget is not a pass.
            incomplete = Some(format!(
                "--max-requests {} does not cover {}, a required scenario",
                probe.opts.max_requests, s.name
            ));
        }
        let verdict = match skipped(probe, s, &reports, stopped.as_deref()) {
            Some(why) => Verdict::Skipped(why),
            None => match tokio::time::timeout_at(deadline, judged(probe, s)).await {
                Ok(verdict) => verdict,
                Err(_) => {
                    let why = format!("--timeout ({:?}) passed", probe.opts.timeout);
                    Err((
                        why.clone(),
                        Verdict::Skipped(format!("cut off: {why} while it ran")),
                    ))
                }
            }
            .unwrap_or_else(|(why, verdict)| {
                stopped = Some(why.clone());
                incomplete = Some(why);
                verdict
            }),
        };
        let mut report = ScenarioReport::new(s.name, s.rule, required, verdict);
        // A server that echoes a credential (into a body, an id) never gets it printed.
        report.detail = probe.scrub(report.detail);
        reports.push(report);
    }
    Outcome {
        reports,
        incomplete,
    }
}

/// `s` run, and its verdict judged by [`cut_short`].
async fn judged(probe: &Probe, s: &Scenario) -> Result<Verdict, (String, Verdict)> {
    let verdict = (s.run)(probe).await;
    cut_short(probe, s.name, verdict).await
}

/// `verdict` of the scenario `name`, or why the run cannot go on and the verdict to report:
/// the baseline failed (the API's answers cannot be judged), or a failure with an exchange
/// that got no answer, and the API now refuses connections (it stopped, which is no rule
/// broken).
async fn cut_short(
    probe: &Probe,
    name: &str,
    verdict: Verdict,
) -> Result<Verdict, (String, Verdict)> {
    let Verdict::Failed(why, exchanges) = &verdict else {
        return Ok(verdict);
    };
    if name == FIRST {
        let why = why.lines().next().unwrap_or("");
        return Err((format!("{FIRST} failed: {why}"), verdict));
    }
    if exchanges.iter().all(|e| e.answer.is_ok()) {
        return Ok(verdict);
    }
    match probe.target.reachable().await {
        Ok(()) => Ok(verdict),
        Err(e) => {
            let why = format!("the API stopped answering during {name}: {e:#}");
            let cut = Verdict::Skipped(format!("cut off: {why}"));
            Err((why, cut))
        }
    }
}

/// Why `s` is not run: not in the profile, the run stopped, a scenario it needs did
/// not pass, or the budget does not cover it.
fn skipped(
    probe: &Probe,
    s: &Scenario,
    reports: &[ScenarioReport],
    stopped: Option<&str>,
) -> Option<String> {
    let unmet = s.needs.filter(|n| {
        let found = reports.iter().find(|r| r.name == *n);
        found.is_some_and(|r| r.status != crate::report::Status::Passed)
    });
    if probe.profile() == Profile::Ietf && s.ietf == Ietf::NotARule {
        Some("not a rule of draft-07 (--profile ietf)".into())
    } else if let Some(why) = stopped {
        Some(why.to_owned())
    } else if let Some(needed) = unmet {
        Some(format!(
            "{needed} did not pass: this scenario would prove nothing"
        ))
    } else if !probe.affords(s.cost(probe)) {
        Some(format!(
            "needs up to {} requests, past --max-requests ({} sent)",
            s.cost(probe),
            probe.sent()
        ))
    } else {
        None
    }
}

/// The first request of a new key: `2xx` with an id, or the failure that says why not.
pub(crate) async fn first(p: &Probe, key: &str) -> Result<(Exchange, String), Verdict> {
    let e = p.send(p.request(Some(key))).await;
    let id = ran_first(p, key, &e)?;
    Ok((e, id))
}

/// The id of `e`, the answer to `key`'s first request as the operation's own: `2xx` with an
/// id (remembered for [`kept`]), or the failure that says why not.
pub(crate) fn ran_first(p: &Probe, key: &str, e: &Exchange) -> Result<String, Verdict> {
    if let Err(no) = &e.answer {
        let why = format!("the first request of a new key got no answer: {no}");
        return Err(Verdict::failed(why, &[e]));
    }
    if !success(e.status()) {
        let why = format!(
            "the first request of a new key was answered {}: expected 2xx",
            e.status()
        );
        return Err(Verdict::failed(why, &[e]));
    }
    let Some(id) = p.id(e) else {
        let why = format!(
            "the first request of a new key has no id in {}",
            p.id_source()
        );
        return Err(Verdict::failed(why, &[e]));
    };
    // A new key's first answer is never another key's: marked as a replay, or holding an
    // id another key ran with, it was answered from another record.
    if let Some(other) = p.ran().into_iter().find(|r| r.id == id && r.key != key) {
        let why = format!(
            "a new key ({key}) was answered with the id another key ({}) ran with (\"{id}\"): \
             one key's request got another's answer",
            other.key
        );
        return Err(Verdict::failed(why, &[e]));
    }
    let lifetime = e.answer.as_ref().ok();
    if lifetime.is_some_and(crate::probe::replayed) {
        let why = format!("the first request of a new key ({key}) was answered as a replay");
        return Err(Verdict::failed(why, &[e]));
    }
    let lifetime = lifetime.and_then(|a| a.header("idempotency-key-lifetime").parse().ok());
    p.remember(Ran {
        key: key.to_owned(),
        id: id.clone(),
        at: Instant::now(),
        lifetime,
    });
    Ok(id)
}

/// Sends `request` until it is not answered `409` (a request of its key still in flight),
/// at most `tries` times within `--request-timeout`: each wait honours `Retry-After` and
/// doubles from [`FIRST_BACKOFF`], at most an eighth of that time (a quarter when
/// `Retry-After` asks for more).
pub(crate) async fn settled(p: &Probe, request: Request, tries: usize) -> Exchange {
    let window = p.opts.request_timeout;
    let started = Instant::now();
    let mut backoff = FIRST_BACKOFF;
    let mut e = p.send(request.clone()).await;
    for _ in 1..tries {
        let left = window.saturating_sub(started.elapsed());
        if e.status() != 409 || left.is_zero() {
            break;
        }
        let asked = (e.answer.as_ref().ok())
            .and_then(|a| a.header("retry-after").parse().ok())
            .map(Duration::from_secs);
        let wait = asked.unwrap_or_default().max(backoff).min(window / 4);
        tokio::time::sleep(wait.min(left)).await;
        backoff = (backoff * 2).min(window / 8);
        e = p.send(request.clone()).await;
    }
    e
}

/// A failure when `e` holds an id other than `first`'s: the operation ran twice.
pub(crate) fn ran_twice(
    p: &Probe,
    id: &str,
    first: &Exchange,
    e: &Exchange,
) -> Result<(), Verdict> {
    match p.id(e) {
        Some(other) if other != id => Err(Verdict::failed(
            format!("ran twice: one key, ids {id} and {other}"),
            &[first, e],
        )),
        _ => Ok(()),
    }
}

/// A failure unless `e` was refused with `status` (`4xx`) without running: no id, and
/// under the idemgate profile an `application/problem+json` body (RFC 9457).
pub(crate) fn refused(p: &Probe, e: &Exchange, statuses: &[u16], what: &str) -> Verdict {
    let Ok(a) = &e.answer else {
        return Verdict::failed(format!("{what}: no answer"), &[e]);
    };
    if let Some(id) = p.id(e) {
        return Verdict::failed(
            format!("{what}: ran (id {id}), expected {statuses:?}"),
            &[e],
        );
    }
    if !statuses.contains(&a.status) {
        return Verdict::failed(
            format!("{what}: answered {}, expected {statuses:?}", a.status),
            &[e],
        );
    }
    if p.profile() == Profile::Idemgate && !a.is_problem() {
        return Verdict::failed(
            format!("{what}: {} without application/problem+json", a.status),
            &[e],
        );
    }
    Verdict::Passed(format!("{what}: {}", a.status))
}
