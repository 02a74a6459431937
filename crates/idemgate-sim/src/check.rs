//! The checks after every run: per key, executions at most once (on a route that opted in
//! to take-overs, at most one unmarked); every replay equal to the first outcome that
//! landed; no record left `in_progress` without a live lease or a known reason; no write
//! landed under a lease the record did not carry, and no take-over over a record other
//! than the one it read or without raising the fence; every stored outcome an answer the
//! upstream sent whole.

use std::collections::BTreeMap;

use idemgate_core::integrity::RawRecord;
use idemgate_core::{RecordState, UnixMillis};

use crate::client::Got;
use crate::world::World;
use crate::{Planted, Report};

/// Runs every check on a finished run.
pub fn check(seed: u64, planted: Option<Planted>, world: &World, got: &[Got]) -> Report {
    let mut violations = executions(world);
    violations.extend(replays(world, got));
    violations.extend(whole_answers(world));
    let (records, now) = world.shared.cluster.records();
    violations.extend(left_in_progress(world, &records, now));
    for stale in world.shared.cluster.stale_writes() {
        violations.push(format!("a stale write landed: {stale}"));
    }
    let (digest, events) = world.shared.cluster.digest();
    Report {
        seed,
        planted,
        path: world.shared.path,
        violations,
        digest,
        events,
        faults: world.shared.cluster.faults(),
        executions: world
            .upstream
            .calls()
            .iter()
            .filter(|c| c.ran.is_some())
            .count(),
        failovers: world.shared.cluster.failovers(),
    }
}

/// At most once per key; on `/to`, at most one unmarked execution.
fn executions(world: &World) -> Vec<String> {
    let mut ran: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let calls = world.upstream.calls();
    for call in calls.iter().filter(|c| c.ran.is_some()) {
        let (all, unmarked) = ran.entry(call.key.as_str()).or_default();
        *all += 1;
        *unmarked += usize::from(!call.marked);
    }
    let mut out = Vec::new();
    for (key, route) in &world.keys {
        let (all, unmarked) = ran.get(key.as_str()).copied().unwrap_or_default();
        let opted_in = *route == "/to";
        if (!opted_in && all > 1) || unmarked > 1 {
            out.push(format!(
                "{key} on {route} ran {all} times ({unmarked} unmarked)"
            ));
        }
    }
    out
}

/// Every replay is the first outcome that landed.
fn replays(world: &World, got: &[Got]) -> Vec<String> {
    let mut out = Vec::new();
    for g in got.iter().filter(|g| g.replayed) {
        let first = world.shared.cluster.first_completed(&g.key);
        if first.as_ref() != Some(&(g.status, g.body.clone())) {
            out.push(format!(
                "{} replayed {} {:?}, the first outcome that landed was {first:?}",
                g.key, g.status, g.body
            ));
        }
    }
    out
}

/// Every outcome that landed is an answer the upstream sent whole, for its key, of an
/// execution of it: a response cut on the wire (the proxy path) is never stored.
fn whole_answers(world: &World) -> Vec<String> {
    let calls = world.upstream.calls();
    let sent = |key: &str, status: u16, body: &[u8]| {
        let ids = calls.iter().filter(|c| c.key == key).filter_map(|c| c.ran);
        let mut whole = ids.map(|id| match status {
            201 => format!("exec-{id}"),
            500 => format!("exec-{id} failed"),
            _ => String::new(),
        });
        (status == 503 && body == b"try again") || whole.any(|w| w.as_bytes() == body)
    };
    let landed = world.shared.cluster.landed();
    let bad = landed
        .iter()
        .filter(|(key, status, body)| !sent(key, *status, body));
    bad.map(|(key, status, body)| format!("{key} stored {status} {body:?}, never sent whole"))
        .collect()
}

/// Every `in_progress` record has a live lease, or a known reason: its holder crashed; it
/// is a take-over whose forward did nothing, left to lapse; or its release landed and a
/// failover lost it (a journal drops a released entry: the key answers `outcome-unknown`,
/// never runs again; docs/postgres-ha.md).
fn left_in_progress(world: &World, records: &[RawRecord], now: UnixMillis) -> Vec<String> {
    let mut out = Vec::new();
    let in_progress = Some(RecordState::InProgress.as_str());
    for raw in records.iter().filter(|r| r.state.as_deref() == in_progress) {
        if raw.lease_expires_at.is_some_and(|at| at > now) {
            continue;
        }
        let owner = raw.lease_token.and_then(|t| world.shared.owners.of(t));
        let known = owner.is_some_and(|o| {
            let crashed = !world.slots.iter().any(|s| s.runs(o.instance));
            let release_lost = o.released && world.shared.cluster.failovers() > 0;
            crashed || (o.takeover && !o.wrote) || release_lost
        });
        if !known {
            out.push(format!(
                "{} left in_progress (fence {:?}) with a lapsed lease and no known reason ({owner:?})",
                raw.key.key.as_str(),
                raw.fence
            ));
        }
    }
    out
}
