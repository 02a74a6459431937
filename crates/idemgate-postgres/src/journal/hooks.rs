//! Where the store's primitives meet the forward journal: the gate before an acquire, the
//! entry before a lease is handed out, the outcome after it landed.

use std::time::Duration;

use idemgate_core::record::duration_ms;
use idemgate_core::{
    IdempotencyRecord, InsertOutcome, InsertRequest, Lease, LeaseToken, RecordState, StoreError,
    StoredResponse,
};

use super::Journal;
use crate::store::PostgresStore;

/// A new key refused while a failover is handled ([`StoreError::Refused`]: nothing was
/// written).
#[derive(Debug, thiserror::Error)]
#[error(
    "new keys are refused for {} ms more: the store failed over, and the forward journals \
     restore what it lost first",
    .0.as_millis()
)]
pub(crate) struct FailoverGrace(pub(crate) Duration);

/// A retry answered from a record whose outcome landed while a failover is handled, held
/// ([`StoreError::Refused`]) until the gate opens: another process's journal may hold a
/// take-over of the key under a higher fence, whose outcome its restore writes over this one.
#[derive(Debug, thiserror::Error)]
#[error(
    "the outcome of this key is held for {} ms more: it landed after the store failed over, \
     and the forward journals restore what the failover lost first",
    .0.as_millis()
)]
pub(crate) struct ReplayHeld(pub(crate) Duration);

/// The longest an outcome write refused during a failover waits for the restore.
const RESTORE_WAIT: Duration = Duration::from_secs(30);

/// Whether `record` holds the outcome `response` stands for (`None`: failed).
fn landed(record: &IdempotencyRecord, response: Option<&StoredResponse>) -> bool {
    match response {
        Some(response) => record.response.as_ref() == Some(response),
        None => record.state == RecordState::Failed,
    }
}

impl Journal {
    /// [`StoreError::Refused`] while the gate is closed; [`StoreError::Unavailable`] once
    /// the file cannot be trusted.
    fn refuse_if_closed(&self) -> Result<(), StoreError> {
        if let Some(broken) = self
            .broken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Err(StoreError::Unavailable(broken.into()));
        }
        match self.gate.closed_for() {
            Some(left) => Err(StoreError::Refused(Box::new(FailoverGrace(left)))),
            None => Ok(()),
        }
    }

    /// Whether a retry answered from `record` is held while the gate is closed: a completed
    /// or failed record whose outcome landed at or after the failover's first detection
    /// (less `failover_grace`, for the lag between a detection and its record), or any such
    /// record before this process has read that detection. Records completed before are
    /// what the standby held: no take-over under a higher fence can follow a completion.
    fn held(&self, record: &IdempotencyRecord) -> bool {
        if record.state == RecordState::InProgress {
            return false;
        }
        let Some(first) = self.gate.first_seen_ms() else {
            return true;
        };
        let since = first.saturating_sub(duration_ms(self.options.failover_grace));
        record.completed_at.is_none_or(|at| at >= since)
    }
}

impl Journal {
    /// `record`, unless it is held while a failover is handled ([`ReplayHeld`]): what a
    /// read of a key (a waiter's, an operator's) gets then.
    pub(crate) fn unless_held(
        &self,
        record: IdempotencyRecord,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        match self.gate.closed_for() {
            Some(left) if self.held(&record) => {
                Err(StoreError::Refused(Box::new(ReplayHeld(left))))
            }
            _ => Ok(Some(record)),
        }
    }
}

impl PostgresStore {
    /// `insert_or_get` with the journal: while the gate is closed the key is only read (a
    /// live record is returned, none is refused); a fresh lease is journaled before it is
    /// returned, and released if the journal cannot take it or the gate closed meanwhile
    /// (the insert may have reached a new primary before the journals restored it).
    pub(crate) async fn insert_or_get_journaled(
        &self,
        journal: &Journal,
        req: &InsertRequest,
    ) -> Result<InsertOutcome, StoreError> {
        if let Err(refused) = journal.refuse_if_closed() {
            return match self.existing(&req.key).await? {
                Some(InsertOutcome::Existing { record, .. }) if journal.held(&record) => {
                    let left = journal.gate.closed_for().unwrap_or_default();
                    Err(StoreError::Refused(Box::new(ReplayHeld(left))))
                }
                Some(found) => Ok(found),
                None => Err(refused),
            };
        }
        let outcome = self.insert_or_get_direct(req).await?;
        let InsertOutcome::Inserted(lease) = &outcome else {
            return Ok(outcome);
        };
        let kept = match journal.refuse_if_closed() {
            Ok(()) => journal.inserted(req, lease).await,
            Err(refused) => Err(refused),
        };
        if let Err(e) = kept {
            // Nothing ran: the key is released so its retry can run it once.
            if let Err(release) = self.release_direct(lease).await {
                tracing::warn!(error = %idemgate_core::report::error_text(&release), "forward journal: a key not journaled was not released; retries get 409 until its lease lapses");
            }
            return Err(e);
        }
        Ok(outcome)
    }

    /// `take_over` with the journal: refused while the gate is closed; the lease journaled
    /// before it is returned. A lease that cannot be journaled is not released (the earlier
    /// attempt may have run): it lapses, and a later retry may take it over again.
    pub(crate) async fn take_over_journaled(
        &self,
        journal: &Journal,
        seen: &IdempotencyRecord,
        token: LeaseToken,
        lease_ttl: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        journal.refuse_if_closed()?;
        let Some(lease) = self.take_over_direct(seen, token, lease_ttl).await? else {
            return Ok(None);
        };
        journal.refuse_if_closed()?;
        journal.taken_over(seen, &lease, lease_ttl).await?;
        Ok(Some(lease))
    }

    /// How many keys the forward journal ([`crate::PostgresOptions::with_forward_journal`])
    /// holds: acquired by this process and not yet replayed by every streaming standby
    /// (nor past the window). `None` without a journal.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the file cannot be read.
    pub async fn forward_journal_len(&self) -> Result<Option<u64>, StoreError> {
        match &self.journal {
            Some(link) => link.journal.len().await.map(Some),
            None => Ok(None),
        }
    }

    /// `complete` (with `response`) or `fail` with the journal. The outcome is journaled
    /// whether or not the store took it. Refused (`LeaseLost`) while a failover is being
    /// handled (the record was lost with the old primary and not restored yet), the write
    /// waits for the restore, which carries the journaled outcome, and tries again: it
    /// succeeds where the restore gave the lease back, and counts as landed where the
    /// restore wrote this outcome (the record then holds it, at this fence).
    pub(crate) async fn outcome_journaled(
        &self,
        journal: &Journal,
        lease: &Lease,
        response: Option<&StoredResponse>,
    ) -> Result<(), StoreError> {
        let wrote = self.outcome_direct(lease, response).await;
        if !matches!(wrote, Ok(()) | Err(StoreError::LeaseLost)) {
            return wrote;
        }
        journal.outcome(lease, response);
        if wrote.is_ok() || !journal.gate.wait_restored(RESTORE_WAIT).await {
            return wrote;
        }
        match self.outcome_direct(lease, response).await {
            Err(StoreError::LeaseLost) => match self.get_direct(&lease.key).await? {
                Some(r) if r.fence == lease.fence && landed(&r, response) => Ok(()),
                _ => Err(StoreError::LeaseLost),
            },
            again => again,
        }
    }

    /// Drops the entry of a released `lease`, if the store keeps a journal.
    pub(crate) fn journal_released(&self, lease: &Lease) {
        if let Some(link) = &self.journal {
            link.journal.released(lease);
        }
    }
}
