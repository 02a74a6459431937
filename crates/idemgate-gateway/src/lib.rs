//! `idemgate serve`: a reverse proxy that makes retried `POST`/`PATCH` requests safe for
//! any HTTP API, with no change to that API. It is the [`idemgate_tower::IdempotencyLayer`]
//! wrapped around a proxy to the upstream, with its records in an embedded SQLite file by
//! default.
//!
//! # Layout
//! - [`cli`]: the command line; [`config`]: the TOML file and its validation.
//! - [`server`]: the listeners and the background tasks; [`purge`]: the purge loop
//!   (`idemgate purge` and `serve`'s) and its progress; [`proxy`]: the upstream client;
//!   [`linger`]: lingering close, so early answers reach clients still sending.
//! - [`store`]: the backend chosen at run time; [`gauges`]: its gauges on `/metrics`;
//!   [`admin`]: `inspect`, `release`, `resolve`, `stats`; [`telemetry`]: the metrics
//!   exporter; [`tls`]: rustls for the listener and `https://` upstreams; [`reload`]: the
//!   configuration re-read on `SIGHUP`.
//! - [`openapi`]: the contract as OpenAPI (`idemgate openapi`).
//! - [`key_service`]: `idemgate key-service`, the [`idemgate_key_service`] router on this
//!   binary's stores, listeners and TLS.
//! - [`payments`] and [`demo`]: the example payments API and the incident replay.

pub mod admin;
pub mod cli;
pub mod config;
pub mod demo;
pub mod gauges;
pub mod key_service;
pub mod linger;
pub mod migrate;
pub mod openapi;
pub mod payments;
pub mod proxy;
pub mod purge;
pub mod reload;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod tls;

use anyhow::Context;
use clap::Parser;

use crate::cli::{Cli, Command, ConfigCommand};

/// Runs the command line. Returns the process exit code.
pub async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The demo prints its own report; the gateway logs start-up and problems.
    let default_level = match cli.command {
        Command::Demo => "error",
        _ => "info",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| default_level.into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        cli::LogFormat::Json => logs.json().init(),
        cli::LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
    }
    match dispatch(cli.command).await {
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

async fn dispatch(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => {
            let config = args.resolve()?;
            if let Some(secret) = &config.log_hash_key {
                idemgate_core::loghash::set_secret(secret.as_bytes())
                    .map_err(|e| anyhow::anyhow!("log_hash_key: {e}"))?;
            }
            server::prometheus();
            let listener = tokio::net::TcpListener::bind(config.listen)
                .await
                .with_context(|| format!("listen: cannot bind {}", config.listen))?;
            let admin = match config.admin_listen {
                Some(addr) => Some(
                    tokio::net::TcpListener::bind(addr)
                        .await
                        .with_context(|| format!("admin_listen: cannot bind {addr}"))?,
                ),
                None => None,
            };
            let resolve: reload::Resolve = Box::new(move || args.resolve());
            server::run_reloading(config, listener, admin, shutdown_signal(), Some(resolve)).await
        }
        Command::KeyService(args) => key_service::command(args, shutdown_signal()).await,
        Command::Config(ConfigCommand::Check { file }) => cli::config_check(&file),
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
        Command::Demo => demo::run().await,
        Command::DemoApi { listen } => {
            let listener = tokio::net::TcpListener::bind(listen).await?;
            println!("example payments API on http://{}", listener.local_addr()?);
            payments::serve(listener, shutdown_signal()).await
        }
    }
}

pub(crate) async fn shutdown_signal() {
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
