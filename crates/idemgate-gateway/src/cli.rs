//! The `idemgate` command line.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use crate::config::{Config, Validated};

/// idemgate: makes retried POST/PATCH requests safe with Idempotency-Key.
///
/// The first request with a key runs once; its response is stored, and every retry with the
/// same key gets that response without running the operation again. `serve` runs the
/// gateway (a reverse proxy) in front of any HTTP API; the other commands check its
/// configuration, create or upgrade the store's schema, purge expired records, and replay
/// the incidents it exists for. Send SIGHUP to a running `serve` to reload its file.
#[derive(Debug, Parser)]
#[command(name = "idemgate", version)]
pub struct Cli {
    /// Log line format on stderr: `text` or `json` (one JSON object per line). Levels and
    /// targets come from `RUST_LOG` (default `info`; `idemgate::access=off` drops the
    /// access log).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// tracing-subscriber's JSON lines: `timestamp`, `level`, `target`, `fields`.
    Json,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway in front of an HTTP API.
    Serve(ServeArgs),
    /// Run the key service: the HTTP/JSON API that services in any language call before
    /// and after their business operation (acquire, complete, fail, release, renew).
    KeyService(crate::key_service::KeyServiceArgs),
    /// Work with configuration files.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Delete expired records in batches: once, or on an interval with --watch.
    Purge(crate::purge::PurgeArgs),
    /// Create or upgrade the store's schema (SQLite migrates on open too).
    Migrate(StoreArgs),
    /// Show the records of one idempotency key (state, lease, fence, times, response).
    Inspect(crate::admin::Selector),
    /// Remove the records of one key whatever their state (an operator override).
    Release(crate::admin::ReleaseArgs),
    /// Record the outcome an operator established for a stuck key: retries get it, and the
    /// operation never runs again (an operator override).
    Resolve(crate::admin::ResolveArgs),
    /// Count the records a store holds, by state.
    Stats(crate::admin::StatsArgs),
    /// Print the idempotency contract of the covered routes as OpenAPI, or add it to an API
    /// description (--merge).
    Openapi(crate::openapi::OpenapiArgs),
    /// Check any API's Idempotency-Key behaviour from the outside: crafted requests to one
    /// operation, a verdict per scenario (creates real resources: use a test environment).
    ///
    /// About 30 scenarios (docs/probe.md), each judged against one rule of the `idemgate`
    /// profile (README "The contract") or of draft-07 (`--profile ietf`). Two resource ids
    /// (--id-pointer, or Location) for one key mean the operation ran twice. Exit code 0 when
    /// every scenario the profile requires passed (skipped ones do not fail it), 1 when one
    /// failed, 2 when the probe could not run or finish (a bad option, no connection,
    /// `--timeout` passed).
    Probe(Box<idemgate_probe::ProbeArgs>),
    /// Replay the incidents idemgate exists for, without and with the gateway.
    Demo,
    /// Run the example payments API alone (for trying the gateway by hand).
    DemoApi {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:3000")]
        listen: SocketAddr,
    },
}

/// `idemgate config ...`
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Check a configuration file and report every error.
    Check {
        /// The TOML file.
        file: PathBuf,
        /// Then connect to its store as `serve` would (no migration, nothing served; a
        /// SQLite file is not created) and print what the store can lose: its durability
        /// and the settings read. Exits non-zero when the store cannot be reached.
        #[arg(long)]
        connect: bool,
    },
}

/// Flags of `serve` (they override the config file).
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// TOML configuration file (see docs/gateway.example.toml).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Gateway listen address [default: 127.0.0.1:8080].
    #[arg(long)]
    pub listen: Option<String>,
    /// Admin listen address for /healthz, /readyz, /metrics [default: 127.0.0.1:9090].
    #[arg(long)]
    pub admin_listen: Option<String>,
    /// Base URL of the API, e.g. http://127.0.0.1:3000.
    #[arg(long)]
    pub upstream: Option<String>,
    /// Store URL: sqlite://PATH [default: sqlite://./idemgate.db], postgres://..., redis://...,
    /// redis+cluster://host:port,host:port, redis+sentinel://host:port,host:port/MASTER or
    /// memory://.
    #[arg(long)]
    pub store: Option<String>,
}

/// Selecting a store.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// TOML configuration file whose `store` to use.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Store URL (overrides the file).
    #[arg(long)]
    pub store: Option<String>,
}

impl ServeArgs {
    /// The file (if any) with the flags applied, validated.
    ///
    /// # Errors
    /// Every problem found, one per line, each naming its field.
    pub fn resolve(&self) -> anyhow::Result<Validated> {
        let (mut config, file_errs) = Config::load(self.config.as_deref())?;
        set(&mut config.listen, &self.listen);
        set(&mut config.admin_listen, &self.admin_listen);
        set(&mut config.upstream, &self.upstream);
        set(&mut config.store, &self.store);
        if let Some(secret) = std::env::var_os("IDEMGATE_LOG_HASH_KEY") {
            config.log_hash_key = secret
                .into_string()
                .map_err(|_| anyhow::anyhow!("IDEMGATE_LOG_HASH_KEY: must be UTF-8"))?;
        }
        match config.validate() {
            Ok(v) if file_errs.is_empty() => Ok(v),
            Ok(_) => Err(invalid(&file_errs)),
            Err(errs) => Err(invalid(&[file_errs, errs].concat())),
        }
    }
}

impl StoreArgs {
    /// The store URL and opening options from the flag, the file or the defaults.
    ///
    /// # Errors
    /// When the file cannot be read or the URL is not supported.
    pub fn resolve(&self) -> anyhow::Result<(crate::store::StoreUrl, crate::store::OpenOptions)> {
        let mut config = self.file()?;
        set(&mut config.store, &self.store);
        let url = crate::store::StoreUrl::parse(&config.store)
            .map_err(|e| anyhow::anyhow!("store: {e}"))?;
        Ok((url, config.open_options()))
    }

    /// The `--config` file, parsed (unknown keys and type errors refused), or the defaults
    /// without one.
    pub(crate) fn file(&self) -> anyhow::Result<Config> {
        let file = self.config.as_deref();
        file.map_or_else(|| Ok(Config::default()), Config::from_file)
    }
}

/// Sets `field` to the flag's value, when the flag is given.
pub(crate) fn set(field: &mut String, flag: &Option<String>) {
    if let Some(v) = flag {
        field.clone_from(v);
    }
}

/// Validates, turning the error list into one message.
///
/// # Errors
/// Every problem found, one per line.
pub fn validated(config: Config) -> anyhow::Result<Validated> {
    config.validate().map_err(|errs| invalid(&errs))
}

/// One message listing `errs`, one per line.
pub fn invalid(errs: &[String]) -> anyhow::Error {
    anyhow::anyhow!("invalid configuration:\n  {}", errs.join("\n  "))
}

/// `idemgate config check FILE [--connect]`: every error, or "ok"; with `connect`, then
/// what the store can lose ([`connect_report`]).
///
/// # Errors
/// The problems found; with `connect`, a store that cannot be opened or does not answer.
pub async fn config_check(file: &std::path::Path, connect: bool) -> anyhow::Result<()> {
    let (config, mut errs) = Config::load(Some(file))?;
    if config.upstream.is_empty() {
        // The flag may supply it at start-up; the rest is checked.
        println!("note: `upstream` is not set in the file; `serve` needs it (or `--upstream`), `key-service` and the admin commands do not");
    }
    errs.extend(config.check());
    if !errs.is_empty() {
        return Err(invalid(&errs)).with_context(|| format!("{}", file.display()));
    }
    println!("{}: ok", file.display());
    if connect {
        print!("{}", connect_report(&config).await?);
    }
    Ok(())
}

/// Opens `config`'s store with its options, as `serve` does but without migrating or
/// creating a SQLite file, pings it and reads its durability: the lines
/// `store: BACKEND answers` and [`crate::durability::report`]'s. A durability that cannot
/// be read is said in its line (`serve` would run on).
///
/// # Errors
/// The store cannot be opened or does not answer within `store_timeout`.
pub async fn connect_report(config: &Config) -> anyhow::Result<String> {
    use idemgate_core::{GaugedStore, IdempotencyStore};
    let url =
        crate::store::StoreUrl::parse(&config.store).map_err(|e| anyhow::anyhow!("store: {e}"))?;
    let opts = crate::store::OpenOptions {
        migrate: false,
        create: false,
        ..config.open_options()
    };
    let store = crate::store::open(&url, &opts).await?;
    let (backend, deadline) = (store.backend(), opts.store_timeout);
    let answer = match tokio::time::timeout(deadline, store.ping()).await {
        Ok(answer) => answer.map_err(anyhow::Error::from),
        Err(_) => Err(anyhow::anyhow!("no answer within store_timeout")),
    };
    answer.with_context(|| format!("the {backend} store does not answer"))?;
    let durability = match tokio::time::timeout(deadline, store.durability()).await {
        Ok(Ok(read)) => crate::durability::report(backend, &read),
        Ok(Err(e)) => format!(
            "durability: cannot be read: {}\n",
            crate::store::describe(&e)
        ),
        Err(_) => "durability: cannot be read: no answer within store_timeout\n".to_owned(),
    };
    Ok(format!("store: {backend} answers\n{durability}"))
}
