//! The store primitives of [`SlotStore`]: each one is the memory store's own, applied
//! under the faults of [`SlotStore::faulty`], with its row image committed to the
//! replication log, journaled, traced, and checked for a stale write landing.

use std::num::NonZeroU32;
use std::time::Duration;

use idemgate_core::integrity::RawRecord;
use idemgate_core::store::Result;
use idemgate_core::{
    IdempotencyRecord, IdempotencyStore, InsertOutcome, InsertRequest, Lease, LeaseToken, Peeked,
    RecordState, ScopedKey, StoreError, StoredResponse, UnixMillis,
};

use super::{ms, now, Shared, SlotStore};
use crate::journal::Journal;
use crate::Planted;

/// The pre-image check of a fenced write: the record carried the lease.
fn carried(pre: Option<&RawRecord>, lease: &Lease) -> bool {
    pre.is_some_and(|r| {
        r.state.as_deref() == Some(RecordState::InProgress.as_str())
            && r.fence == Some(lease.fence)
            && r.lease_token == Some(lease.token.0)
    })
}

/// A fenced write (`renew`, `complete`, `fail`, `release`): applied by `write`, its row
/// committed, and flagged if it landed under a lease the record did not carry.
fn fenced<T>(
    s: &Shared,
    op: &str,
    lease: &Lease,
    instance: u64,
    write: impl FnOnce() -> Result<T>,
) -> Result<(T, usize)> {
    let pre = s.cluster.primary().raw(&lease.key);
    let out = write()?;
    let at = s.cluster.commit(&lease.key);
    let name = lease.key.key.as_str();
    s.cluster.trace(format!(
        "i{instance} {op} {name} fence {} at {at}",
        lease.fence
    ));
    if !carried(pre.as_ref(), lease) {
        s.cluster.stale_write(format!(
            "{op} of {name} under fence {} landed on {:?} fence {:?}",
            lease.fence,
            pre.as_ref().and_then(|r| r.state.clone()),
            pre.as_ref().and_then(|r| r.fence)
        ));
    }
    Ok((out, at))
}

/// The row an acquisition wrote and its log position: journaled once its answer reaches
/// the gateway ([`SlotStore::journal_acquired`]), as the real journal is written after the
/// store answered (an acquisition whose answer was lost is never journaled).
type Acquired = Option<(RawRecord, usize)>;

/// The pre-image check of a take-over that landed: the record was still exactly the one
/// read (`in_progress`, its fence, token and lease end), and the new lease's fence is above
/// it. Flagged as a stale write otherwise (a compare-and-set that compared too little).
fn check_take_over(s: &Shared, seen: &IdempotencyRecord, pre: Option<&RawRecord>, lease: &Lease) {
    let same = pre.is_some_and(|r| {
        r.state.as_deref() == Some(RecordState::InProgress.as_str())
            && seen.state == RecordState::InProgress
            && r.fence == Some(seen.fence)
            && r.lease_token == seen.lease_token.map(|t| t.0)
            && r.lease_expires_at == seen.lease_expires_at
    });
    if !same || lease.fence <= seen.fence {
        s.cluster.stale_write(format!(
            "take-over of {} to fence {} landed on {:?} fence {:?}, read as fence {}",
            lease.key.key.as_str(),
            lease.fence,
            pre.and_then(|r| r.state.clone()),
            pre.and_then(|r| r.fence),
            seen.fence
        ));
    }
}

/// Commits and traces an acquisition that landed; returns what to journal.
fn acquired(s: &Shared, instance: u64, lease: &Lease, takeover: bool) -> Acquired {
    let at = s.cluster.commit(&lease.key);
    let raw = s.cluster.primary().raw(&lease.key);
    s.owners.got(lease.token.0, instance, takeover);
    let what = if takeover { "takes over" } else { "inserts" };
    let name = lease.key.key.as_str();
    s.cluster.trace(format!(
        "i{instance} {what} {name} fence {} at {at}",
        lease.fence
    ));
    raw.map(|raw| (raw, at))
}

fn insert(
    s: &Shared,
    j: &Journal,
    instance: u64,
    req: &InsertRequest,
) -> Result<(InsertOutcome, Acquired)> {
    let primary = s.cluster.primary();
    let gated = j.gate_closed() && s.planted != Some(Planted::JournalIgnored);
    let out = match gated {
        // New keys are refused while the gate is closed; live records are still read.
        true => match now(primary.get(&req.key))? {
            Some(record) if j.held(&record) => {
                return Err(StoreError::Refused(
                    "simulated: replay held in a failover".into(),
                ))
            }
            Some(record) => InsertOutcome::Existing {
                record,
                now: primary.now(),
            },
            None => {
                return Err(StoreError::Refused(
                    "simulated: failover gate closed".into(),
                ))
            }
        },
        false => now(primary.insert_or_get(req))?,
    };
    let journaled = match &out {
        InsertOutcome::Inserted(lease) => acquired(s, instance, lease, false),
        InsertOutcome::Existing { .. } => None,
    };
    Ok((out, journaled))
}

/// The planted "renew without its fence check": any `in_progress` record's lease extended.
fn renew_unfenced(s: &Shared, lease: &Lease, ttl: Duration) -> Result<UnixMillis> {
    let primary = s.cluster.primary();
    let mut raw = primary.raw(&lease.key).ok_or(StoreError::LeaseLost)?;
    if raw.state.as_deref() != Some(RecordState::InProgress.as_str()) {
        return Err(StoreError::LeaseLost);
    }
    let until = primary.now() + ms(ttl);
    raw.lease_expires_at = Some(until);
    raw.expires_at = raw.expires_at.map(|e| e.max(until));
    primary.put_raw(&lease.key, Some(raw));
    Ok(until)
}

fn outcome(
    s: &Shared,
    j: &Journal,
    i: u64,
    lease: &Lease,
    write: Option<&StoredResponse>,
) -> Result<()> {
    s.owners.wrote(lease.token.0);
    let primary = s.cluster.primary();
    let state = match write {
        Some(_) => RecordState::Completed,
        None => RecordState::Failed,
    };
    // As the real journal: the outcome is journaled whether or not the store takes it.
    j.outcome(lease, state, write, primary.now());
    let (_, at) = fenced(s, state.as_str(), lease, i, || match write {
        Some(r) => now(primary.complete(lease, r)),
        None => now(primary.fail(lease)),
    })?;
    if let Some(r) = write {
        let key = lease.key.key.as_str();
        s.cluster
            .completed(key, r.status, r.body.clone(), j.gate_closed());
    }
    if let Some(raw) = primary.raw(&lease.key) {
        j.wrote(raw, i, at);
    }
    Ok(())
}

/// Whether `record` holds `write` under `lease`'s fence (a write refused after the
/// restore wrote its outcome counts as landed, as in the real journal).
fn holds(
    record: Option<&IdempotencyRecord>,
    lease: &Lease,
    write: Option<&StoredResponse>,
) -> bool {
    record.is_some_and(|r| {
        r.fence == lease.fence
            && match write {
                Some(w) => r.response.as_ref() == Some(w),
                None => r.state == RecordState::Failed,
            }
    })
}

impl SlotStore {
    /// One outcome write under the faults.
    async fn outcome_once(&self, lease: &Lease, write: &Option<StoredResponse>) -> Result<()> {
        let (l, w) = (lease.clone(), write.clone());
        self.faulty("outcome", move |s, j, i| outcome(s, j, i, &l, w.as_ref()))
            .await
    }

    /// An outcome write; refused (`LeaseLost`) while a failover is handled, it waits for
    /// the restore (up to 30 s) and tries again, as the real journal does.
    async fn outcome_write(&self, lease: &Lease, write: Option<StoredResponse>) -> Result<()> {
        let first = self.outcome_once(lease, &write).await;
        if !matches!(first, Err(StoreError::LeaseLost)) || !self.journal.gate_closed() {
            return first;
        }
        for _ in 0..300 {
            if !self.journal.gate_closed() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        match self.outcome_once(lease, &write).await {
            Err(StoreError::LeaseLost) => {
                let found = self.get(&lease.key).await?;
                match holds(found.as_ref(), lease, write.as_ref()) {
                    true => Ok(()),
                    false => Err(StoreError::LeaseLost),
                }
            }
            again => again,
        }
    }
}

impl IdempotencyStore for SlotStore {
    async fn insert_or_get(&self, req: &InsertRequest) -> Result<InsertOutcome> {
        let req = req.clone();
        let (out, journaled) = self
            .faulty("insert_or_get", move |s, j, i| insert(s, j, i, &req))
            .await?;
        self.journal_acquired(journaled);
        Ok(out)
    }

    async fn take_over(
        &self,
        seen: &IdempotencyRecord,
        token: LeaseToken,
        lease_ttl: Duration,
    ) -> Result<Option<Lease>> {
        let seen = seen.clone();
        self.faulty("take_over", move |s, j, i| {
            // As the real journal: take-overs are refused while the gate is closed.
            if j.gate_closed() && s.planted != Some(Planted::JournalIgnored) {
                return Err(StoreError::Refused(
                    "simulated: failover gate closed".into(),
                ));
            }
            let primary = s.cluster.primary();
            let pre = primary.raw(&seen.key);
            let lease = now(primary.take_over(&seen, token, lease_ttl))?;
            if let Some(l) = &lease {
                check_take_over(s, &seen, pre.as_ref(), l);
            }
            let journaled = lease.as_ref().and_then(|l| acquired(s, i, l, true));
            Ok((lease, journaled))
        })
        .await
        .map(|(lease, journaled)| {
            self.journal_acquired(journaled);
            lease
        })
    }

    async fn renew(&self, lease: &Lease, lease_ttl: Duration) -> Result<UnixMillis> {
        let lease = lease.clone();
        self.faulty("renew", move |s, _, i| {
            let planted = s.planted == Some(Planted::RenewUnfenced);
            let primary = s.cluster.primary();
            fenced(s, "renew", &lease, i, || match planted {
                true => renew_unfenced(s, &lease, lease_ttl),
                false => now(primary.renew(&lease, lease_ttl)),
            })
            .map(|(until, _)| until)
        })
        .await
    }

    async fn complete(&self, lease: &Lease, response: &StoredResponse) -> Result<()> {
        self.outcome_write(lease, Some(response.clone())).await
    }

    async fn fail(&self, lease: &Lease) -> Result<()> {
        self.outcome_write(lease, None).await
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let lease = lease.clone();
        self.faulty("release", move |s, j, i| {
            s.owners.wrote(lease.token.0);
            let primary = s.cluster.primary();
            // As the real store: the entry dropped when the release landed or found the
            // lease gone (`LeaseLost`).
            match fenced(s, "release", &lease, i, || now(primary.release(&lease))) {
                Ok(_) => {
                    s.owners.released(lease.token.0);
                    j.released(&lease);
                }
                Err(StoreError::LeaseLost) => {
                    j.released(&lease);
                    return Err(StoreError::LeaseLost);
                }
                Err(e) => return Err(e),
            }
            Ok(())
        })
        .await
    }

    async fn get(&self, key: &ScopedKey) -> Result<Option<IdempotencyRecord>> {
        let key = key.clone();
        self.faulty("get", move |s, _, _| now(s.cluster.primary().get(&key)))
            .await
    }

    async fn peek(&self, key: &ScopedKey) -> Result<Peeked> {
        let key = key.clone();
        self.faulty("peek", move |s, _, _| now(s.cluster.primary().peek(&key)))
            .await
    }

    async fn purge_expired(&self, _batch: NonZeroU32) -> Result<u64> {
        Ok(0)
    }

    async fn ping(&self) -> Result<()> {
        self.faulty("ping", |_, _, _| Ok(())).await
    }

    fn backend(&self) -> &'static str {
        "sim"
    }
}
