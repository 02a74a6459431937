//! The store's replication and failover, and the forward journal's restore after one.

use crate::state::{Record, State, Stored};
use crate::Protocol;

/// The standby catches up; journal entries whose outcome it now holds are dropped, by
/// gateways not handling a failover (the journal's `confirm` is skipped while its gate is
/// closed, and a failover clears the positions read before it: an outcome written to a
/// lost primary is confirmed only once its entry was restored to the new one).
pub(crate) fn replicate(s: &mut State) {
    s.standby = s.primary;
    for gw in s.gateways.iter_mut().filter(|gw| gw.restored) {
        gw.journal
            .retain(|(e, _)| !e.released && e.record.state == Stored::InProgress);
    }
}

/// The standby becomes the primary. With the journal, new keys are refused until every
/// gateway restored its entries.
pub(crate) fn failover(m: &Protocol, s: &mut State) {
    s.primary = s.standby;
    s.failovers += 1;
    s.landed_in_gate = false;
    if m.journal {
        s.gate_closed = true;
        for gw in &mut s.gateways {
            gw.restored = false;
        }
    }
}

/// The journal's restore: an entry is written back where the store holds no record of the
/// key; or an `in_progress` one of a lower fence, or of the same fence under another token
/// or whose outcome the entry holds; or, for an entry with an outcome, a completed record of
/// a lower fence (a take-over's outcome the failover lost wins over an outcome written after
/// it). An `in_progress` entry of this run gets a live lease; one of an earlier run a lapsed
/// one (a retry gets `outcome-unknown`).
pub(crate) fn restore(m: &Protocol, s: &mut State, gateway: u8) {
    let g = usize::from(gateway);
    let entries = s.gateways[g].journal.clone();
    for (e, this_run) in entries.into_iter().filter(|(e, _)| !e.released) {
        if m.bugs.journal_ignored {
            break;
        }
        let (entry, done) = (e.record, e.record.state != Stored::InProgress);
        let replaces = match s.primary {
            None => true,
            Some(r) if r.state == Stored::InProgress => {
                r.fence < entry.fence || (r.fence == entry.fence && (r.token != entry.token || done))
            }
            Some(r) => done && r.fence < entry.fence && !m.bugs.restore_keeps_completed,
        };
        if replaces {
            let live = e.record.state == Stored::InProgress && this_run;
            let lease_end = if live { s.now + m.lease_ttl } else { s.now };
            s.primary = Some(Record {
                lease_end,
                ..e.record
            });
            s.landed_in_gate |= done;
            s.restores += 1;
        }
    }
    s.gateways[g].restored = true;
    s.gate_closed = s.gateways.iter().any(|gw| !gw.restored);
    s.landed_in_gate &= s.gate_closed;
}
