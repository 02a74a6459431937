//! `idemgate inspect`, `idemgate release`, `idemgate resolve` and `idemgate stats`: an
//! operator's view of the records of one idempotency key, the overrides that remove them or
//! record their known outcome, and what a store holds. The store is chosen as for `idemgate
//! purge` (`--store URL` or `--config FILE`); the work is the store's [`AdminStore`]
//! operations and its primitives.
//!
//! `release` deletes exactly the records it showed (each compared on its state, fence,
//! lease and times in the store, atomically), so a holder that renewed, completed or took
//! over a record meanwhile keeps it, and the command says so. A record whose operation may
//! have run (`in_progress`, `failed`, `completed`) is only released with `--force`, and an
//! `in_progress` or `failed` one whose attempt may still be running at the upstream (by
//! the gateways' `upstream_timeout`, `window`) only with `--upstream-stopped` as well.
//! `resolve` ([`resolve()`]) records the outcome instead. Both write an audit entry
//! ([`AUDIT_TARGET`]).

use std::io::{BufRead, IsTerminal, Write};

use anyhow::{bail, Context};
use clap::Args;
use idemgate_core::admin::{AdminStore, KeyFilter, Listing, Operator};
use idemgate_core::{
    now_millis, GaugedStore, IdempotencyKey, IdempotencyStore, RawRecord, RecordState,
};
use idemgate_tower::PrincipalSource;

use self::audit::Entry;
use self::window::Limits;
use crate::cli::StoreArgs;
use crate::store::{AnyStore, StoreUrl};

mod audit;
mod gateway;
mod output;
mod resolve;
mod window;

pub use audit::{ResolvedView, TARGET as AUDIT_TARGET};
pub use output::{print_records, print_stats, RecordView, StatsView};
pub use resolve::{resolve, ResolveArgs};

/// Which records: one idempotency key, optionally narrowed to a route and a caller.
#[derive(Debug, Args)]
pub struct Selector {
    /// Which store.
    #[command(flatten)]
    pub store: StoreArgs,
    /// The client's `Idempotency-Key` value (as sent, without quotes).
    #[arg(long)]
    pub key: String,
    /// The route template the record belongs to, e.g. "POST /payments".
    #[arg(long)]
    pub route: Option<String>,
    /// The principal the record belongs to, as stored (e.g. `auth:0123...`, `hdr:alice`).
    #[arg(long, conflicts_with = "authorization")]
    pub principal: Option<String>,
    /// The caller's `Authorization` header value: the principal is computed from it by the
    /// principal source of --route (else of `[defaults]`) in --config: `auth:` + its
    /// SHA-256 by default, its HMAC with `principal_hash_key_file`, the verified token's
    /// claim with `jwt:CLAIM` (pass `"Bearer <token>"`); a `header:` source needs --principal.
    #[arg(long)]
    pub authorization: Option<String>,
    /// Print JSON instead of a table (fields: docs/operations.md, "JSON output").
    #[arg(long)]
    pub json: bool,
    /// Include the stored response bodies (UTF-8, invalid bytes replaced).
    #[arg(long)]
    pub show_body: bool,
}

/// Flags of `release`.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// Which records.
    #[command(flatten)]
    pub select: Selector,
    /// Do not ask for confirmation.
    #[arg(long)]
    pub yes: bool,
    /// Also release records whose operation may have run (`in_progress`, `failed`,
    /// `completed`): the next retry runs it again. If it ran, use `resolve` instead.
    #[arg(long)]
    pub force: bool,
    /// The API can no longer be running this request: its workers were restarted or its
    /// own timeout has passed. Without it, an `in_progress` or `failed` record is refused
    /// until the gateways' `upstream_timeout` (+ 5 s) has passed since its attempt's last
    /// lease or its failure, the earliest "it did not run" can be concluded.
    #[arg(long)]
    pub upstream_stopped: bool,
    /// Who is releasing, for the audit entry (default: `$SUDO_USER`, `$USER`, the uid).
    #[arg(long)]
    pub operator: Option<String>,
}

/// Flags of `stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Which store.
    #[command(flatten)]
    pub store: StoreArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

impl Selector {
    /// The filter the flags describe.
    ///
    /// # Errors
    /// When `--key` is not a valid `Idempotency-Key`, or `--authorization` is blank.
    pub fn filter(&self) -> anyhow::Result<KeyFilter> {
        let key = IdempotencyKey::new(&self.key).map_err(|e| anyhow::anyhow!("--key: {e}"))?;
        let principal = match &self.authorization {
            Some(value) => Some(self.principal_of(value)?),
            None => self.principal.clone(),
        };
        Ok(KeyFilter {
            key,
            route: self.route.clone(),
            principal,
        })
    }

    /// The principal the gateway gives a caller whose `Authorization` header is `value`: by
    /// the principal source of `--route` (or the default route) in `--config`, else the
    /// default source (the header's hash).
    fn principal_of(&self, value: &str) -> anyhow::Result<String> {
        let source = match &self.store.config {
            Some(_) => {
                let valid = gateway::load(&self.store)?;
                let policy = &valid.policy;
                let route = self.route.as_deref();
                let found = policy.routes().find(|(r, _)| Some(*r) == route);
                let rp = found.map_or(policy.default_route(), |(_, rp)| rp);
                rp.principal.clone()
            }
            None => PrincipalSource::AuthorizationHash,
        };
        let hint = match &source {
            PrincipalSource::AuthorizationHash | PrincipalSource::AuthorizationHmac(_) => {
                "the value is blank".to_owned()
            }
            PrincipalSource::Jwt { claim, .. } => format!("the route's principal is `jwt:{claim}`: pass \"Bearer <token>\"; an expired token cannot be checked: pass --principal jwt:{claim}:<hash>, see docs/configuration.md"),
            PrincipalSource::Header(name) => format!("the route's principal is the `{name}` header; pass --principal hdr:<value>"),
            _ => "the route's principal does not come from `Authorization`; pass --principal".to_owned(),
        };
        match idemgate_tower::principal_from_authorization(&source, value) {
            Ok(Some(principal)) => Ok(principal),
            Ok(None) => bail!("--authorization: {hint}"),
            Err(refused) => bail!("--authorization: {} ({hint})", refused.detail()),
        }
    }
}

/// Why `memory://` cannot be inspected from outside.
const MEMORY: &str = "memory:// keeps its records inside one running gateway: \
     inspect, release, resolve and stats need the gateway's persistent store (sqlite://, postgres://, redis://)";

/// Opens the store the flags name, for operator work: no migration, no new SQLite file,
/// and never `memory://`.
async fn open(args: &StoreArgs) -> anyhow::Result<AnyStore> {
    let (url, mut opts) = args.resolve()?;
    if url == StoreUrl::Memory {
        bail!("store: {MEMORY}");
    }
    opts.migrate = false;
    opts.create = false;
    crate::store::open(&url, &opts).await
}

pub(super) async fn find(select: &Selector) -> anyhow::Result<(AnyStore, Listing)> {
    let filter = select.filter()?;
    let store = open(&select.store).await?;
    let listing = store
        .list_key(&filter)
        .await
        .context("cannot list the key")?;
    if listing.records.is_empty() {
        note_route(select);
    }
    Ok((store, listing))
}

/// On standard error: a note when `--route` is not a route template of `--config` (a typo
/// of one, or a route no record can have), so "no record matches" is not read as "the key
/// has no record". Nothing when the file cannot be read: the note is only a hint.
fn note_route(select: &Selector) {
    let (Some(route), Some(file)) = (&select.route, &select.store.config) else {
        return;
    };
    let Ok(config) = gateway::load(&select.store) else {
        return;
    };
    if let Some(note) = gateway::route_note(&config.policy, route, file) {
        eprintln!("{note}");
    }
}

/// How long the gateways of `store`'s configuration let an attempt run.
fn limits(store: &StoreArgs) -> anyhow::Result<Limits> {
    Ok(Limits::new(&gateway::load(store)?, store.config.is_some()))
}

/// `idemgate inspect`: prints the matching records.
///
/// # Errors
/// Bad flags, or a store that cannot be opened or read.
pub async fn inspect(select: Selector) -> anyhow::Result<()> {
    // Only for `may_run_until`: a file this host cannot fully validate (e.g. the gateways'
    // TLS files are elsewhere) must not keep an operator from seeing the records.
    let limits = limits(&select.store)
        .inspect_err(|e| eprintln!("note: may_run_until not shown: {e:#}"))
        .ok();
    let (_store, listing) = find(&select).await?;
    let mut views = RecordView::all(&listing, select.show_body);
    if select.show_body {
        open_bodies(&select.store, &mut views, &listing)?;
    }
    if let Some(limits) = limits {
        limits.annotate(&mut views, &listing);
    }
    let mut out = std::io::stdout().lock();
    output::print_records(&mut out, &views, listing.now, select.json)?;
    if views.is_empty() && !select.json {
        writeln!(out, "no record matches")?;
    }
    Ok(())
}

/// Opens the sealed bodies of `views` with the configuration's `encryption_key_files`.
///
/// # Errors
/// A key file that cannot be read or is not a key.
fn open_bodies(
    store: &StoreArgs,
    views: &mut [RecordView],
    listing: &Listing,
) -> anyhow::Result<()> {
    if !listing.records.iter().any(|r| r.sealed_by.is_some()) {
        return Ok(());
    }
    let Some(ring) = keyring(store)? else {
        return Ok(());
    };
    for (view, raw) in views.iter_mut().zip(&listing.records) {
        view.open_body(raw, &ring);
    }
    Ok(())
}

/// The keys of the configuration's `encryption_key_files`, if it has any.
///
/// # Errors
/// A key file that cannot be read or is not a key (the message names the file).
pub(crate) fn keyring(store: &StoreArgs) -> anyhow::Result<Option<idemgate_core::seal::Keyring>> {
    let files = store.file()?.encryption_key_files;
    if files.is_empty() {
        return Ok(None);
    }
    let paths: Vec<&str> = files.iter().map(|f| f.trim()).collect();
    let ring = idemgate_core::seal::Keyring::load(&paths);
    Ok(Some(ring.map_err(|e| {
        anyhow::anyhow!("encryption_key_files: {e}")
    })?))
}

/// `idemgate release`: shows the matching records, asks, and deletes exactly those, with an
/// audit entry for each.
///
/// # Errors
/// No record matches; a record whose operation may have run without `--force`; one whose
/// attempt may still be running at the upstream without `--upstream-stopped`; no
/// confirmation; a record that changed since it was shown (the others are released); a
/// store error.
pub async fn release(args: ReleaseArgs) -> anyhow::Result<()> {
    let select = &args.select;
    let by = audit::operator(args.operator.as_deref());
    audit::use_log_secret(&select.store)?;
    let limits = limits(&select.store)?;
    let (store, listing) = find(select).await?;
    let mut views = RecordView::all(&listing, select.show_body);
    limits.annotate(&mut views, &listing);
    let mut out = std::io::stdout().lock();
    if views.is_empty() {
        bail!("no record matches; nothing to release");
    }
    if !select.json {
        output::print_records(&mut out, &views, listing.now, false)?;
    }
    if !args.force {
        refuse_unforced(&views)?;
    }
    refuse_in_flight(&views)?;
    if !args.upstream_stopped {
        limits.refuse_running(&listing)?;
    }
    if !args.yes {
        let n = views.len();
        let prompt =
            format!("Release {n} record(s)? Retries will then run the operation. Type yes: ");
        confirm(&prompt, "release")?;
    }
    let mut changed = 0;
    for (raw, view) in listing.records.iter().zip(&mut views) {
        let deleted = store
            .delete_exact(raw)
            .await
            .context("cannot release the record")?;
        view.outcome = Some(if deleted { "released" } else { "changed" });
        changed += usize::from(!deleted);
        if deleted {
            audit::record(&released(&by, raw, view, args.upstream_stopped))?;
        }
        if !select.json {
            writeln!(out, "{}", view.outcome_line())?;
        }
    }
    if select.json {
        output::print_records(&mut out, &views, listing.now, true)?;
    }
    if changed > 0 {
        bail!("{changed} record(s) changed since they were shown and were kept; run inspect again");
    }
    Ok(())
}

/// Refuses, without `--force`, records whose operation may have run: retries of a
/// completed one get its answer, of an `in_progress` or `failed` one an error; released,
/// the next retry runs the operation again. Expired records (retries already run) and
/// records with no readable state pass.
fn refuse_unforced(views: &[RecordView]) -> anyhow::Result<()> {
    let live = views.iter().filter(|v| v.condition != "expired");
    let states: Vec<_> = live
        .map(|v| v.state.as_deref().and_then(RecordState::parse))
        .collect();
    let done = states
        .iter()
        .filter(|s| **s == Some(RecordState::Completed))
        .count();
    // In progress, failed, or unreadable (a record whose state cannot be read may hold any).
    let unsure = states.len() - done;
    if unsure > 0 {
        bail!(
            "{unsure} of these records is in_progress, failed or unreadable: the operation may \
             have run; the next retry runs it again. If it ran, record its outcome with \
             `idemgate resolve`; if it did not (and it can no longer be running at the \
             upstream), pass --force. Nothing was released"
        );
    }
    if done > 0 {
        bail!(
            "{done} of these records is completed: retries get its stored response. \
             Releasing it lets the next retry run the operation again; pass --force to do so. \
             Nothing was released"
        );
    }
    Ok(())
}

/// Refuses, even with `--force` and `--upstream-stopped`, a record whose lease is live: a
/// gateway is running its attempt now and will record the outcome; released, a retry would
/// run the operation beside it.
fn refuse_in_flight(views: &[RecordView]) -> anyhow::Result<()> {
    let live = views.iter().filter(|v| v.condition == "in_flight").count();
    if live > 0 {
        bail!(
            "{live} of these records is in flight: a gateway holds a live lease and is running \
             the operation now; wait for its outcome (inspect again after the lease). Nothing \
             was released"
        );
    }
    Ok(())
}

/// The audit entry of a released record; `stopped`: the operator passed
/// `--upstream-stopped`, and that is part of the trail.
fn released<'a>(
    by: &'a Operator,
    raw: &'a RawRecord,
    view: &RecordView,
    stopped: bool,
) -> Entry<'a> {
    let state = view.state.as_deref().unwrap_or("unknown");
    let fence = view.fence.map_or("-".into(), |f| f.to_string());
    Entry {
        action: "released",
        by,
        at: now_millis(),
        scope: &raw.key,
        from: format!("{state} ({}), fence {fence}", view.condition),
        to: match stopped {
            true => "deleted: the next retry runs the operation (--upstream-stopped: the \
                     operator says the API can no longer be running it)"
                .into(),
            false => "deleted: the next retry runs the operation".into(),
        },
    }
}

/// Asks on the terminal (`prompt`); refuses without one. `what` names the action.
pub(super) fn confirm(prompt: &str, what: &str) -> anyhow::Result<()> {
    if !std::io::stdin().is_terminal() {
        bail!("refusing to {what} without confirmation: stdin is not a terminal (pass --yes)");
    }
    eprint!("{prompt}");
    std::io::stderr().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    if line.trim() != "yes" {
        bail!("not confirmed; nothing was done");
    }
    Ok(())
}

/// `idemgate stats`: counts by state, bytes, oldest and expired records.
///
/// # Errors
/// A store that cannot be opened or read.
pub async fn stats(args: StatsArgs) -> anyhow::Result<()> {
    let store = open(&args.store).await?;
    let stats = store
        .count_exact()
        .await
        .context("cannot count the records")?;
    let sealed = store
        .count_sealed()
        .await
        .context("cannot count the sealed records")?;
    let mut view = StatsView::new(&stats, store.backend());
    view.sealed_by_key_id = sealed.map(|ids| ids.into_iter().collect());
    output::print_stats(&mut std::io::stdout().lock(), &view, args.json)
}
