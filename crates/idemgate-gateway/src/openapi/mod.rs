//! `idemgate openapi`: the idempotency contract of a configuration as OpenAPI, alone (an
//! OpenAPI 3.1 fragment) or merged into the API's own description (`--merge`, OpenAPI 3.0
//! or 3.1, YAML or JSON, written back in the input's format). The description itself is
//! [`idemgate_tower::openapi::Contract`]; this module reads and writes the files.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use idemgate_tower::openapi::{Contract, Doc};

use crate::config::Config;

/// Flags of `idemgate openapi`.
#[derive(Debug, Args)]
pub struct OpenapiArgs {
    /// TOML configuration file whose routes and policies to describe (without it, the
    /// defaults).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// An existing API description (OpenAPI 3.0 or 3.1, YAML or JSON) to add the contract to;
    /// the result keeps its format. Configured routes that match none of its operations are
    /// listed on standard error.
    #[arg(long, value_name = "API_DESCRIPTION")]
    pub merge: Option<PathBuf>,
    /// Write the result to this file instead of standard output.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Format of the fragment (without `--merge`): `json` or `yaml`.
    #[arg(long, value_enum, default_value_t = Format::Json, conflicts_with = "merge")]
    pub format: Format,
}

/// A description's file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// JSON, pretty-printed.
    Json,
    /// YAML 1.2.
    Yaml,
}

impl Format {
    /// The format of a description's text: JSON when it starts with `{`, else YAML.
    pub fn of(text: &str) -> Self {
        let text = text.trim_start_matches('\u{feff}').trim_start();
        if text.starts_with('{') {
            Format::Json
        } else {
            Format::Yaml
        }
    }
}

/// Reads a description in either format.
///
/// # Errors
/// A message naming the file and, for a syntax error, where it is.
pub fn read(path: &Path) -> anyhow::Result<(Doc, Format)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--merge: cannot read {}", path.display()))?;
    let format = Format::of(&text);
    let doc = match format {
        Format::Json => serde_json::from_str::<Doc>(&text)
            .with_context(|| format!("--merge: {} is not valid JSON", path.display()))?,
        Format::Yaml => serde_saphyr::from_str_with_options::<Doc>(&text, yaml_options())
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("--merge: {} is not valid YAML", path.display()))?,
    };
    Ok((doc, format))
}

/// YAML limits: serde-saphyr's defaults (alias expansion bounded by the anchors' size, so a
/// "billion laughs" document is refused) with room for the largest public API descriptions
/// (millions of nodes) and the nesting serde_json accepts (128).
fn yaml_options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_nodes = 8_000_000;
    budget.max_events = 16_000_000;
    budget.max_depth = 128;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options
}

/// Writes a description in `format`, ending with a newline.
///
/// # Errors
/// When it cannot be serialized (a number that YAML or JSON cannot hold).
pub fn write(doc: &Doc, format: Format) -> anyhow::Result<String> {
    let mut text = match format {
        Format::Json => serde_json::to_string_pretty(doc)?,
        Format::Yaml => serde_saphyr::to_string(doc).map_err(|e| anyhow::anyhow!("{e}"))?,
    };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

/// Runs `idemgate openapi`.
///
/// # Errors
/// An invalid configuration, an unreadable or non-OpenAPI-3 description, an unwritable
/// output.
pub fn command(args: OpenapiArgs) -> anyhow::Result<()> {
    let policy = policy(args.config.as_deref())?;
    let contract = Contract {
        policy: &policy,
        gateway: true,
    };
    let (doc, format) = match &args.merge {
        None => (contract.fragment(), args.format),
        Some(path) => {
            let (mut doc, format) = read(path)?;
            let at = path.display();
            let merged = contract.merge_into(&mut doc);
            let report = merged.map_err(|e| anyhow::anyhow!("--merge: {at}: {e}"))?;
            let n = report.operations.len();
            eprintln!(
                "idemgate openapi: added the idempotency contract to {n} operation(s) of {at}"
            );
            for route in &report.unmatched_routes {
                eprintln!("idemgate openapi: route `{route}` matches no operation of {at}");
            }
            (doc, format)
        }
    };
    let text = write(&doc, format)?;
    match &args.output {
        Some(path) => std::fs::write(path, text)
            .with_context(|| format!("--output: cannot write {}", path.display())),
        None => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .context("cannot write to standard output")
        }
    }
}

/// The validated policy of a configuration file: its routes section only.
fn policy(file: Option<&Path>) -> anyhow::Result<idemgate_tower::Policy> {
    let (config, mut errs) = Config::load(file)?;
    let policy = config.routes_section(&mut errs);
    if !errs.is_empty() {
        return Err(crate::cli::invalid(&errs)).with_context(|| match file {
            Some(p) => format!("{}", p.display()),
            None => "the default configuration".into(),
        });
    }
    Ok(policy)
}
