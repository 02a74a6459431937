//! `idemgate probe`: checks from the outside that one operation of any HTTP API keeps the
//! Idempotency-Key contract, whatever runs it (idemgate's gateway, its Rust middleware, or
//! another framework's library).
//!
//! It sends crafted requests (about 30 scenarios: a required key, the key's syntax, replays,
//! another body under the same key, JSON spellings, duplicates at once, a client that
//! disconnects, another principal, another route, path spellings, a body over the limit, a
//! `5xx` and its retry, the key's lifetime, `GET`) and judges each answer against the rule
//! of the chosen [`Profile`]: `idemgate` (README "The contract", docs/errors.md) or `ietf`
//! (draft-ietf-httpapi-idempotency-key-header-07, without the 8–128 key length, idemgate's
//! headers and JSON canonicalisation). An execution is told apart by the resource id in the
//! answer (`--id-pointer`, or `Location`): two ids for one key mean the operation ran twice.
//!
//! It never sends more than `--max-requests` (default 200) requests; each covered request
//! may create a real resource, so it is meant for test environments.
//!
//! ```no_run
//! # async fn probe() -> anyhow::Result<()> {
//! use clap::Parser;
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)]
//!     probe: idemgate_probe::ProbeArgs,
//! }
//! let cli = Cli::parse_from(["probe", "http://127.0.0.1:8080/payments", "--id-pointer", "/id"]);
//! let report = idemgate_probe::run(&cli.probe.resolve()?, None, |_| {}).await?;
//! println!("{}", report.table());
//! # Ok(()) }
//! ```

use std::io::{IsTerminal, Write as _};
use std::process::ExitCode;
use std::sync::Arc;

pub mod http;
mod options;
mod probe;
mod report;
pub mod scenarios;

pub use options::{Options, ProbeArgs, Profile};
pub use probe::Probe;
pub use report::{Report, ScenarioReport, Status, Verdict};

/// Runs every scenario of [`scenarios::all`] against `opts`'s operation; `tls` is the
/// client configuration for an `https://` URL. `progress` is told each scenario's name
/// before it runs.
///
/// # Errors
/// The URL cannot be reached (no connection, no TLS handshake), or it is not
/// `http`/`https`.
pub async fn run(
    opts: &Options,
    tls: Option<Arc<rustls::ClientConfig>>,
    progress: impl Fn(&str),
) -> anyhow::Result<Report> {
    let target = http::Target::new(&opts.url, tls, opts.request_timeout)?;
    // An unreachable target is an error, not 30 failures.
    target
        .reachable()
        .await
        .map_err(|e| anyhow::anyhow!("{}: {e:#}", opts.url))?;
    let probe = Probe::new(target, opts.clone());
    let all = scenarios::all();
    let outcome = scenarios::run(&probe, &all, progress).await;
    Ok(Report::new(
        outcome.reports,
        probe.sent(),
        outcome.incomplete,
    ))
}

/// `idemgate probe`: says up front what it will send, runs, prints the table (with a
/// progress bar on a terminal) or the JSON report, and returns the exit code: 0 when every
/// required scenario passed, 1 when one failed, 2 when the probe could not run or finish
/// (bad options, the target unreachable, `--timeout` passed, the report not written).
pub async fn command(args: ProbeArgs, tls: Option<Arc<rustls::ClientConfig>>) -> ExitCode {
    let opts = match args.resolve() {
        Ok(opts) => opts,
        Err(e) => return error(&e),
    };
    say(&format!(
        "idemgate probe: up to {} requests to {} {} (profile {}); every covered request may \
         run the operation and create a real resource: use a test environment",
        opts.max_requests,
        opts.method,
        opts.url,
        opts.profile.name()
    ));
    let bar = progress_bar(args.json, scenarios::all().len());
    let report = run(&opts, tls, |name| {
        if let Some(bar) = &bar {
            bar.set_message(name.to_owned());
            bar.inc(1);
        }
    })
    .await;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let report = match report {
        Ok(report) => report,
        Err(e) => return error(&e),
    };
    let text = match args.json {
        true => serde_json::to_string_pretty(&report).expect("a report serializes") + "\n",
        false => report.table(),
    };
    // A closed or full stdout is an error to report, not a panic.
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        return error(&anyhow::anyhow!("writing the report: {e}"));
    }
    match (&report.incomplete, report.passed) {
        (Some(_), _) => ExitCode::from(2),
        (None, true) => ExitCode::SUCCESS,
        (None, false) => ExitCode::from(1),
    }
}

/// Writes `text` to stderr, ignoring a stderr that cannot be written.
fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// Reports `e` and returns exit code 2.
fn error(e: &anyhow::Error) -> ExitCode {
    say(&format!("error: {e:#}"));
    ExitCode::from(2)
}

/// A progress bar of `len` scenarios on a terminal's stderr (none for `--json` or a pipe).
fn progress_bar(json: bool, len: usize) -> Option<indicatif::ProgressBar> {
    if json || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(len as u64);
    let style = indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    Some(bar)
}
