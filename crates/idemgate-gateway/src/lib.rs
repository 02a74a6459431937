//! `idemgate serve`: a reverse proxy that makes retried `POST`/`PATCH` requests safe for
//! any HTTP API, with no change to that API. It is the [`idemgate_tower::IdempotencyLayer`]
//! wrapped around a proxy to the upstream, with its records in an embedded SQLite file by
//! default.
//!
//! # Layout
//! - [`cli`]: the command line; [`config`]: the TOML file and its validation.
//! - [`host`]: what `serve` and `key-service` share (admin listener, shutdown, purge,
//!   gauges); [`server`]: the gateway as a service of it; [`purge`]: the purge loop
//!   (`idemgate purge` and `serve`'s) and its progress; [`proxy`]: the upstream client;
//!   [`linger`]: lingering close, so early answers reach clients still sending;
//!   [`connections`]: every listener's accept loop, `max_connections` and timeouts.
//! - [`store`]: the backend chosen at run time; [`gauges`]: its gauges on `/metrics`;
//!   [`durability`]: what it can lose, logged, exported and on `/readyz`;
//!   [`admin`]: `inspect`, `release`, `resolve`, `stats`; [`telemetry`]: the metrics
//!   exporter; [`tls`]: rustls for the listener and `https://` upstreams; [`reload`]: the
//!   configuration re-read on `SIGHUP`.
//! - [`openapi`]: the contract as OpenAPI (`idemgate openapi`).
//! - [`key_service`]: `idemgate key-service`, the [`idemgate_key_service`] router on this
//!   binary's stores, listeners and TLS.
//!
//! `idemgate demo` and `demo-api` are the binary's: the example payments API and the incident
//! replay live in the `idemgate-demo` crate, outside this library (see [`main`]).

pub mod admin;
pub mod cli;
pub mod config;
pub mod connections;
pub mod durability;
pub mod gauges;
pub mod host;
pub mod key_service;
pub mod linger;
pub mod logging;
pub mod migrate;
pub mod openapi;
pub mod proxy;
pub mod purge;
pub mod reload;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod tls;

use clap::Parser;

use crate::cli::{Cli, Command, ConfigCommand};

/// Runs the command line, handing `demo` the commands this library does not hold
/// ([`Command::Demo`] and [`Command::DemoApi`]). Returns the process exit code.
pub async fn main(demo: impl AsyncFnOnce(Command) -> anyhow::Result<()>) -> std::process::ExitCode {
    let cli = Cli::parse();
    // The demo prints its own report; the gateway logs start-up and problems.
    let default_level = match cli.command {
        Command::Demo => "error",
        Command::Probe(_) => "warn",
        _ => "info",
    };
    let _logging = logging::init(cli.log_format, default_level);
    let command = match cli.command {
        Command::Probe(args) => return probe(*args).await,
        command => command,
    };
    match dispatch(command, demo).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // Each cause once: many drivers repeat their cause in their own message.
            eprintln!(
                "error: {}",
                purge::join_chain(e.chain().map(|c| c.to_string()))
            );
            std::process::ExitCode::from(2)
        }
    }
}

async fn dispatch(
    command: Command,
    demo: impl AsyncFnOnce(Command) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => {
            let config = args.resolve()?;
            telemetry::prometheus();
            let listen = ("listen", config.listen);
            let admin = ("admin_listen", config.admin_listen);
            let (listener, admin, store) = host::prepare(&config.base, listen, admin).await?;
            let resolve: reload::Resolve = Box::new(move || args.resolve());
            let reload = Some(resolve);
            server::run_reloading(config, store, listener, admin, shutdown_signal(), reload).await
        }
        Command::KeyService(args) => key_service::command(args, shutdown_signal()).await,
        Command::Config(ConfigCommand::Check { file, connect }) => {
            cli::config_check(&file, connect).await
        }
        Command::Purge(args) => purge::command(args).await,
        Command::Migrate(args) => {
            let (url, opts) = args.resolve()?;
            println!("{}", migrate::run(&url, &opts).await?);
            Ok(())
        }
        Command::Inspect(args) => admin::inspect(args).await,
        Command::Release(args) => admin::release(args).await,
        Command::Resolve(args) => admin::resolve(args).await,
        Command::Stats(args) => admin::stats(args).await,
        Command::Openapi(args) => openapi::command(args),
        command @ (Command::Demo | Command::DemoApi { .. }) => demo(command).await,
        Command::Probe(_) => anyhow::bail!("idemgate probe runs before the dispatch"),
    }
}

/// `idemgate probe`: its exit code is the probe's (0 passed, 1 a rule broken, 2 not run).
async fn probe(args: idemgate_probe::ProbeArgs) -> std::process::ExitCode {
    let tls = match args.url.starts_with("https:") {
        false => None,
        true => match tls::client_config(args.ca_file.as_deref()) {
            Ok(config) => Some(config),
            Err(e) => {
                eprintln!("error: --ca-file: {e}");
                return std::process::ExitCode::from(2);
            }
        },
    };
    idemgate_probe::command(args, tls).await
}

/// Completes on Ctrl-C or `SIGTERM`, after logging that the process shuts down.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
    tracing::info!("shutting down: finishing requests in flight");
}
