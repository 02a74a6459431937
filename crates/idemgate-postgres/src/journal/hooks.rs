//! Where the store's primitives meet the forward journal: the gate before an acquire, the
//! entry before a lease is handed out, the outcome after it landed.

use std::time::Duration;

use idemgate_core::{
    IdempotencyRecord, InsertOutcome, InsertRequest, Lease, LeaseToken, StoreError, StoredResponse,
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

impl Journal {
    /// [`StoreError::Refused`] while the gate is closed.
    fn refuse_if_closed(&self) -> Result<(), StoreError> {
        match self.gate.closed_for() {
            Some(left) => Err(StoreError::Refused(Box::new(FailoverGrace(left)))),
            None => Ok(()),
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

    /// Journals the outcome written for `lease`, if the store keeps a journal.
    pub(crate) async fn journal_outcome(&self, lease: &Lease, response: Option<&StoredResponse>) {
        if let Some(link) = &self.journal {
            link.journal.outcome(lease, response);
        }
    }

    /// Drops the entry of a released `lease`, if the store keeps a journal.
    pub(crate) async fn journal_released(&self, lease: &Lease) {
        if let Some(link) = &self.journal {
            link.journal.released(lease);
        }
    }
}
