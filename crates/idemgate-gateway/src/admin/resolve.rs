//! `idemgate resolve`: records the outcome an operator established for a stuck key (the
//! upstream's own records show the operation ran, and what it answered), so retries get
//! that answer instead of `outcome-unknown`, and the operation never runs again.
//!
//! The work is [`idemgate_core::admin::resolve`]: a takeover of the record exactly as it was
//! shown (fence + 1; a record that changed between show and confirmation is kept), then a
//! completion under that lease, so a late outcome from the original holder is refused. The
//! record carries who resolved it; the same entry is logged ([`super::audit`]).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context};
use bytes::Bytes;
use clap::Args;
use http::{HeaderMap, HeaderName, HeaderValue};
use idemgate_core::admin::{
    check_resolvable, resolve_sealed, AdminStore, Listing, NotResolvable, OperatorOutcome,
    ResolveError, Resolved,
};
use idemgate_core::integrity::MAX_STORED_RESPONSE_BYTES;
use idemgate_core::{IdempotencyRecord, RawRecord};

use super::audit::{self, Entry};
use super::output::{self, RecordView};
use super::Selector;

/// Flags of `resolve`.
#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// Which record (exactly one must match: narrow with --route and --principal or
    /// --authorization).
    #[command(flatten)]
    pub select: Selector,
    /// The HTTP status the operation answered: what retries get (200-599).
    #[arg(long, value_parser = clap::value_parser!(u16).range(200..=599))]
    pub status: u16,
    /// A file holding the response body retries get (default: empty).
    #[arg(long, value_name = "FILE", conflicts_with = "not_replayable")]
    pub body_file: Option<PathBuf>,
    /// A response header retries get, as `Name: value`; repeat for more.
    #[arg(
        long = "header",
        value_name = "NAME: VALUE",
        conflicts_with = "not_replayable"
    )]
    pub headers: Vec<String>,
    /// The operation ran but its response cannot be given back: retries get `410` with
    /// --detail instead of a replay.
    #[arg(long, requires = "detail")]
    pub not_replayable: bool,
    /// What retries of a not-replayable key are told (one line, at most 1024 bytes).
    #[arg(long, requires = "not_replayable")]
    pub detail: Option<String>,
    /// Do not ask for confirmation.
    #[arg(long)]
    pub yes: bool,
    /// Who is resolving, for the audit entry (default: `$SUDO_USER`, `$USER`, the uid).
    #[arg(long)]
    pub operator: Option<String>,
}

impl ResolveArgs {
    /// The outcome the flags describe, checked as the store will check it.
    ///
    /// # Errors
    /// An unreadable body file, a malformed or reserved header, an outcome no store keeps.
    pub fn outcome(&self) -> anyhow::Result<OperatorOutcome> {
        let headers = self.headers.iter().map(|h| header(h));
        let outcome = match (&self.detail, self.not_replayable) {
            (Some(detail), true) => OperatorOutcome::NotReplayable {
                status: self.status,
                detail: detail.clone(),
            },
            _ => OperatorOutcome::Replayable {
                status: self.status,
                headers: headers.collect::<Result<_, _>>()?,
                body: match &self.body_file {
                    Some(path) => body_file(path)?,
                    None => Bytes::new(),
                },
            },
        };
        outcome
            .check()
            .map_err(|e| anyhow::anyhow!("the outcome cannot be stored: {e}"))?;
        Ok(outcome)
    }
}

/// The contents of `--body-file`, read up to the most a store keeps
/// ([`MAX_STORED_RESPONSE_BYTES`]), so `/dev/zero` or a huge file is refused, not buffered.
fn body_file(path: &std::path::Path) -> anyhow::Result<Bytes> {
    use std::io::Read;
    let at = path.display();
    let cannot = || format!("--body-file: cannot read {at}");
    let file = std::fs::File::open(path).with_context(cannot)?;
    let mut body = Vec::new();
    let limit = MAX_STORED_RESPONSE_BYTES as u64;
    file.take(limit + 1)
        .read_to_end(&mut body)
        .with_context(cannot)?;
    if body.len() as u64 > limit {
        bail!("--body-file: {at} holds more than {limit} bytes, the most a store keeps");
    }
    Ok(Bytes::from(body))
}

/// One `--header 'Name: value'`, refused when a replay would never send it.
fn header(flag: &str) -> anyhow::Result<(String, Bytes)> {
    let Some((name, value)) = flag.split_once(':') else {
        bail!("--header {flag:?}: expected `Name: value`");
    };
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| anyhow::anyhow!("--header {flag:?}: not a valid header name"))?;
    let value = HeaderValue::from_str(value.trim())
        .map_err(|_| anyhow::anyhow!("--header {flag:?}: not a valid header value"))?;
    let mut one = HeaderMap::new();
    one.insert(name.clone(), value);
    match idemgate_tower::replay::headers_to_store(&one, &[]).pop() {
        Some(kept) => Ok(kept),
        None => bail!(
            "--header {flag:?}: `{name}` is never replayed (framing, hop-by-hop, set-cookie, \
             date and idemgate's own headers are not stored)"
        ),
    }
}

/// The one record `listing` holds, validated and resolvable at the listing's clock.
fn the_record(listing: &Listing) -> anyhow::Result<(&RawRecord, IdempotencyRecord)> {
    let raw = match listing.records.as_slice() {
        [] => bail!("no record matches; nothing to resolve"),
        [one] => one,
        many => bail!(
            "{} records match (several routes or principals); pass --route and --principal \
             (or --authorization) to name one. Nothing was resolved",
            many.len()
        ),
    };
    let record = raw.clone().validate().map_err(|e| {
        anyhow::anyhow!("the record is corrupt ({e}): it cannot be resolved; nothing was written")
    })?;
    if let Err(why) = check_resolvable(&record, listing.now) {
        let until = match why {
            NotResolvable::LeaseLive { until } => format!(" (lease until {})", audit::time(until)),
            _ => String::new(),
        };
        bail!("{why}{until}. Nothing was resolved");
    }
    Ok((raw, record))
}

/// What retries will get, in words.
fn promise(outcome: &OperatorOutcome) -> String {
    match outcome {
        OperatorOutcome::Replayable { status, body, .. } => format!(
            "status {status} with a {}-byte body, marked Idempotent-Replayed: true",
            body.len()
        ),
        OperatorOutcome::NotReplayable { status, detail } => {
            format!("410 response-not-kept (the operation ran, status {status}): {detail}")
        }
    }
}

/// `idemgate resolve`: shows the one matching record, asks, and records the outcome.
///
/// # Errors
/// Bad flags; not exactly one record; a record that is corrupt, completed, expired or held
/// by a live lease; no confirmation; a record that changed since it was shown (kept); a
/// store error.
pub async fn resolve(args: ResolveArgs) -> anyhow::Result<()> {
    let select = &args.select;
    let outcome = args.outcome()?;
    let by = audit::operator(args.operator.as_deref());
    audit::use_log_secret(&select.store)?;
    let (store, listing) = super::find(select).await?;
    let (raw, seen) = the_record(&listing)?;
    let mut out = std::io::stdout().lock();
    if !select.json {
        let view = RecordView::new(raw, listing.now, select.show_body);
        output::print_records(&mut out, &[view], listing.now, false)?;
        writeln!(out, "retries will get: {}", promise(&outcome))?;
    }
    if !args.yes {
        let prompt = "Resolve this record? Retries will get the answer above and never run \
                      the operation again. Type yes: ";
        super::confirm(prompt, "resolve")?;
    }
    // Sealed with the gateways' keys, as they would store it (docs/security.md).
    let keyring = super::keyring(&select.store)?;
    let resolved = resolve_sealed(
        &store,
        &seen,
        (listing.now, &outcome, &by),
        keyring.as_ref(),
    );
    let done = match resolved.await {
        Ok(done) => done,
        Err(ResolveError::Changed) => bail!(
            "the record changed since it was shown (a gateway renewed, completed or took it \
             over) and was kept; nothing was resolved. Run inspect again"
        ),
        Err(ResolveError::Store(e)) => {
            return Err(anyhow::Error::new(e).context(
                "cannot resolve the record (if the takeover landed, the record stays \
                 in_progress under the operator's 30 s lease, then is stuck again: resolve \
                 it again)",
            ))
        }
        Err(e) => bail!("{e}; nothing was resolved"),
    };
    audit::record(&entry(&seen, &done, raw, listing.now))?;
    report(&store, select, &done, &mut out).await
}

/// The audit entry of `done`.
fn entry<'a>(
    seen: &'a IdempotencyRecord,
    done: &'a Resolved,
    raw: &RawRecord,
    now: i64,
) -> Entry<'a> {
    let condition = RecordView::new(raw, now, false).condition;
    let (r, fence) = (&done.resolution, done.fence);
    let kept = if r.replayable {
        "replayable"
    } else {
        "not replayable"
    };
    Entry {
        action: "resolved",
        by: &r.by,
        at: r.at,
        scope: &seen.key,
        from: format!("{} ({condition}), fence {}", r.from_state, r.from_fence),
        to: format!("completed, status {}, {kept}, fence {fence}", r.status),
    }
}

/// Prints the record as it now is (or, if it cannot be read back, one line).
async fn report(
    store: &impl AdminStore,
    select: &Selector,
    done: &Resolved,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let filter = select.filter()?;
    let now_listed = store.list_key(&filter).await;
    let mut views = match &now_listed {
        Ok(listing) => RecordView::all(listing, select.show_body),
        Err(_) => Vec::new(),
    };
    views.retain(|v| v.fence == Some(done.fence));
    for v in &mut views {
        v.outcome = Some("resolved");
    }
    match (&now_listed, views.is_empty()) {
        (Ok(listing), false) => output::print_records(out, &views, listing.now, select.json)?,
        _ => writeln!(out, "resolved (fence {}); inspect shows it", done.fence)?,
    }
    Ok(())
}
