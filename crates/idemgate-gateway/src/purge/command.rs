//! `idemgate purge`: its flags, and running it.

use std::num::NonZeroU32;
use std::time::Duration;

use clap::Args;

use super::{progress, watch, PurgeOptions};
use crate::cli::StoreArgs;
use crate::store::StoreUrl;

/// Flags of `purge`.
#[derive(Debug, Args)]
pub struct PurgeArgs {
    /// Which store.
    #[command(flatten)]
    pub store: StoreArgs,
    /// Records deleted per batch.
    #[arg(long, default_value_t = 1000)]
    pub batch: u32,
    /// Keep purging every `--interval` until interrupted.
    #[arg(long)]
    pub watch: bool,
    /// Time between runs with `--watch`, e.g. `60s`, `5m`.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// Count the records that would be purged; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Most records deleted per second (ROWS/s), to spare a busy database.
    #[arg(long, value_name = "ROWS")]
    pub max_rate: Option<u32>,
    /// PostgreSQL table (default `idempotency_records`, or `store_table` of the file).
    #[arg(long)]
    pub table: Option<String>,
    /// Redis key prefix (default `idemgate:`, or `store_key_prefix` of the file).
    #[arg(long)]
    pub key_prefix: Option<String>,
}

/// The SQLite store's one table.
const SQLITE_TABLE: &str = "idempotency_records";

impl PurgeArgs {
    fn options(&self) -> anyhow::Result<PurgeOptions> {
        let batch = NonZeroU32::new(self.batch)
            .ok_or_else(|| anyhow::anyhow!("--batch: must be at least 1"))?;
        let max_rate = self.max_rate.map(|r| {
            NonZeroU32::new(r)
                .ok_or_else(|| anyhow::anyhow!("--max-rate: must be at least 1 row/s"))
        });
        if self.watch && self.interval.is_zero() {
            anyhow::bail!("--interval: must be longer than 0s");
        }
        Ok(PurgeOptions {
            batch,
            max_rate: max_rate.transpose()?,
            dry_run: self.dry_run,
        })
    }

    /// Checks `--table` and `--key-prefix` against the store they would apply to.
    fn check_target(&self, url: &StoreUrl) -> anyhow::Result<()> {
        match (&self.table, url) {
            (Some(t), StoreUrl::Sqlite(_)) if t != SQLITE_TABLE => anyhow::bail!(
                "--table: the SQLite store keeps its records in `{SQLITE_TABLE}`, not `{t}`"
            ),
            (Some(_), StoreUrl::Redis(_) | StoreUrl::Memory) => {
                anyhow::bail!(
                    "--table: applies to SQLite and PostgreSQL stores; Redis uses --key-prefix"
                )
            }
            _ => {}
        }
        if self.key_prefix.is_some() && !matches!(url, StoreUrl::Redis(_)) {
            anyhow::bail!("--key-prefix: applies to Redis stores only; SQL stores use --table");
        }
        Ok(())
    }
}

/// Runs `idemgate purge`: once, or every `--interval` with `--watch` until Ctrl-C or
/// SIGTERM. Prints the summary of a one-shot run on standard output.
///
/// # Errors
/// Bad flags (naming the flag), a store that cannot be opened, or a failed one-shot run
/// (its error once, with each cause once).
pub async fn command(args: PurgeArgs) -> anyhow::Result<()> {
    let opts = args.options()?;
    let (url, mut open) = args.store.resolve()?;
    args.check_target(&url)?;
    open.migrate = false;
    open.create = false;
    open.table = args.table.clone().or(open.table);
    open.key_prefix = args.key_prefix.clone().or(open.key_prefix);
    let store = crate::store::open(&url, &open).await?;
    if args.watch {
        watch(
            &store,
            opts,
            args.interval,
            true,
            progress::for_stderr,
            crate::shutdown_signal(),
        )
        .await;
        return Ok(());
    }
    let mut progress = progress::for_stderr();
    let report = super::run_once(&store, &opts, &mut *progress)
        .await
        .map_err(|e| anyhow::anyhow!("purge failed: {}", super::error_text(&e)))?;
    println!("{}", report.summary());
    Ok(())
}
