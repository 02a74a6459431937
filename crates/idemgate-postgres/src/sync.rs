//! [`crate::PostgresOptions::with_require_synchronous_replication`]: the session check run on
//! every new connection ([`check_session`]), the state shared by a store's clones
//! ([`SyncGuard`]: why new keys are refused, the write permits). The writes themselves run
//! in `primitives.rs` ([`PostgresStore::guarded`]), and are confirmed by
//! [`crate::durability::confirm`].
//!
//! A commit that waits for a standby cannot be interrupted by `statement_timeout` (the
//! server disarms it before committing), and a cancelled wait (`pg_cancel_backend`) makes
//! the commit succeed with only a warning. So a write is reported only once the standbys'
//! positions in `pg_stat_replication` are past the primary's flushed WAL position, read on
//! the same connection right after the write: whatever cut the wait short, the write is
//! on the standby when it is reported.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use idemgate_core::{Lease, ScopedKey, StoreError};
use sqlx::{Executor, PgConnection, Row};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::durability::{refusal, required_standbys};
use crate::error::{PostgresStoreError, Result};
use crate::insert::Write;
use crate::options::PostgresOptions;
use crate::store::PostgresStore;

/// How long new keys stay refused before the next request reads the server again.
const RECHECK_AFTER: Duration = Duration::from_secs(1);
/// A write still waiting this long makes the store read the server again (a standby that
/// stopped answering is seen after a second without a reply).
pub(crate) const STALL_AFTER: Duration = Duration::from_millis(1200);
/// Most outcome writes remembered as unconfirmed ([`SyncGuard::remember`]); the oldest is
/// forgotten first (its retry then answers `LeaseLost`, as without the requirement).
const MAX_REMEMBERED: usize = 4096;
/// The store deadline when no statement timeout is set.
const DEFAULT_DEADLINE: Duration = Duration::from_secs(2);

/// Why a session, a write or a new key fails under the requirement: the source of the
/// error returned.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SyncError {
    /// A write whose arrival on the synchronous standbys was not seen in time.
    #[error("{op} not confirmed by a synchronous standby: {reason}")]
    Unconfirmed {
        /// The store operation.
        op: &'static str,
        /// What was seen instead.
        reason: String,
    },
    /// A new key refused while the standbys cannot be relied on.
    #[error("new keys are refused until synchronous replication is back: {0}")]
    Refusing(String),
    /// No write permit in time.
    #[error("every write connection stayed busy for {0:?} (commits waiting on a standby?)")]
    Busy(Duration),
    /// A session the requirement cannot hold on.
    #[error("require_synchronous_replication: {setting}: {reason}")]
    Session {
        /// The setting or privilege at fault.
        setting: &'static str,
        /// What is wrong and how to fix it.
        reason: String,
    },
}

impl SyncError {
    fn session(setting: &'static str, reason: impl Into<String>) -> PostgresStoreError {
        let reason = reason.into();
        sqlx::Error::Configuration(Box::new(SyncError::Session { setting, reason })).into()
    }
}

/// What [`check_session`] read on a new connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SessionFacts {
    /// The session's `synchronous_commit` (`on` or `remote_apply`).
    pub(crate) synchronous_commit: String,
    /// The server's `synchronous_standby_names`.
    pub(crate) synchronous_standby_names: String,
    /// How many synchronous standbys a commit waits for.
    pub(crate) required_standbys: u32,
    /// How many stream as `sync` or `quorum` now.
    pub(crate) sync_standbys: u32,
}

/// Checks a new session for [`PostgresOptions::with_require_synchronous_replication`] (one
/// statement; none and default facts when it is not required).
///
/// An empty `synchronous_standby_names` does not fail the session: it is emptied at runtime
/// (Patroni's non-strict synchronous mode does when its standby fails), and replays are
/// read on new sessions too; the store refuses new keys meanwhile instead. Connecting the
/// store fails on it ([`PostgresStore::requiring_sync`]).
///
/// # Errors
/// [`PostgresStoreError::Sqlx`] wrapping a configuration error that names the setting: the
/// session's `synchronous_commit` is neither `on` nor `remote_apply`, or the role cannot read
/// `pg_stat_replication`'s LSN columns (`pg_monitor`). Or the statement's own error.
pub(crate) async fn check_session(
    conn: &mut PgConnection,
    options: &PostgresOptions,
) -> Result<SessionFacts, PostgresStoreError> {
    if !options.require_synchronous_replication() {
        return Ok(SessionFacts::default());
    }
    let sql = "SELECT current_setting('synchronous_commit'), \
         current_setting('synchronous_standby_names'), \
         coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false) \
         OR pg_has_role(current_user, 'pg_read_all_stats', 'USAGE'), \
         (SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' \
         AND sync_state IN ('sync', 'quorum'))::int4";
    let row = conn.fetch_one(sql).await?;
    let names: String = row.try_get(1)?;
    let facts = SessionFacts {
        synchronous_commit: row.try_get(0)?,
        required_standbys: required_standbys(&names),
        synchronous_standby_names: names,
        sync_standbys: row.try_get::<i32, _>(3)?.max(0) as u32,
    };
    if !matches!(facts.synchronous_commit.as_str(), "on" | "remote_apply") {
        let reason = format!(
            "the session runs at {}, where commits do not wait for the standby's flush \
             (on or remote_apply are required)",
            facts.synchronous_commit
        );
        return Err(SyncError::session("synchronous_commit", reason));
    }
    if !row.try_get::<bool, _>(2)? {
        let reason = "the role cannot read pg_stat_replication's LSN columns, which confirm \
                      each write: grant pg_monitor to it";
        return Err(SyncError::session("pg_monitor", reason));
    }
    Ok(facts)
}

/// Why new keys are refused, and since when.
#[derive(Debug)]
struct Watch {
    reason: Option<String>,
    at: Instant,
}

/// The requirement's state, shared by a store's clones: why new keys are refused, and the
/// write permits. The refusal is set from a read of the server (`durability.rs`): when the
/// store connects, at each [`idemgate_core::gauges::GaugedStore::durability`] call (the
/// gateway's gauges interval), in the background when a write has waited
/// [`STALL_AFTER`] or was not confirmed, and, while new keys are refused, by a new key at
/// most once every [`RECHECK_AFTER`] (so a refusal ends soon after its cause).
#[derive(Debug)]
pub(crate) struct SyncGuard {
    permits: Arc<Semaphore>,
    acquire_timeout: Duration,
    /// How long a write (its statement, commit and confirmation) may take.
    pub(crate) deadline: Duration,
    watch: Mutex<Watch>,
    /// Wakes the new keys waiting for a permit when new keys become refused.
    refused: Notify,
    rechecking: AtomicBool,
    /// The outcome writes answered unconfirmed, as (key, fence, token), oldest first, at
    /// most [`MAX_REMEMBERED`].
    unconfirmed: Mutex<VecDeque<(ScopedKey, i64, i64)>>,
}

impl SyncGuard {
    /// The state for a store built with `options`; `None` unless synchronous replication is
    /// required.
    pub(crate) fn new(options: &PostgresOptions) -> Option<Arc<Self>> {
        options.require_synchronous_replication().then(|| {
            Arc::new(Self {
                permits: Arc::new(Semaphore::new(options.write_permits())),
                acquire_timeout: options.acquire_timeout(),
                deadline: options.statement_timeout().unwrap_or(DEFAULT_DEADLINE),
                watch: Mutex::new(Watch {
                    reason: None,
                    at: Instant::now(),
                }),
                refused: Notify::new(),
                rechecking: AtomicBool::new(false),
                unconfirmed: Mutex::default(),
            })
        })
    }

    /// Why new keys are refused now, if they are.
    pub(crate) fn refusing(&self) -> Option<String> {
        self.watch().reason.clone()
    }

    fn watch(&self) -> std::sync::MutexGuard<'_, Watch> {
        self.watch.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets why new keys are refused (`None`: they are not), logging a change.
    pub(crate) fn set(&self, reason: Option<String>) {
        let mut watch = self.watch();
        match (&watch.reason, &reason) {
            (old, Some(new)) if old.as_ref() != Some(new) => {
                tracing::warn!(reason = %new, "PostgreSQL store: refusing new keys");
            }
            (Some(_), None) => tracing::info!("PostgreSQL store: accepting new keys again"),
            _ => {}
        }
        let refusing = reason.is_some();
        *watch = Watch {
            reason,
            at: Instant::now(),
        };
        drop(watch);
        if refusing {
            self.refused.notify_waiters();
        }
    }

    /// [`StoreError::Refused`] while new keys are refused.
    ///
    /// # Errors
    /// That refusal, with its reason.
    pub(crate) fn refuse_if_refusing(&self) -> Result<(), StoreError> {
        match self.refusing() {
            Some(reason) => Err(StoreError::Refused(Box::new(SyncError::Refusing(reason)))),
            None => Ok(()),
        }
    }

    /// True (and the caller must call [`SyncGuard::rechecked`]) when new keys are refused
    /// for over [`RECHECK_AFTER`] and no other read of the server is under way.
    pub(crate) fn recheck_due(&self) -> bool {
        let due = {
            let watch = self.watch();
            watch.reason.is_some() && watch.at.elapsed() >= RECHECK_AFTER
        };
        due && self.begin_recheck()
    }

    /// True (and the caller must call [`SyncGuard::rechecked`]) unless a read of the server
    /// is under way.
    pub(crate) fn begin_recheck(&self) -> bool {
        !self.rechecking.swap(true, Ordering::AcqRel)
    }

    /// Ends a read of the server: `Some(reason)` sets the refusal; `None` (the read failed)
    /// leaves it as it was.
    pub(crate) fn rechecked(&self, reason: Option<Option<String>>) {
        if let Some(reason) = reason {
            self.set(reason);
        }
        self.rechecking.store(false, Ordering::Release);
    }

    /// Remembers the outcome write `write` (`complete`, `fail`, `release`) as answered
    /// unconfirmed: its retry, whose compare-and-set finds the row already written at the
    /// lease's fence and token, is then confirmed instead of answered `LeaseLost`.
    pub(crate) fn remember(&self, write: &Write) {
        if let Some(lease) = write.outcome_lease() {
            let mut remembered = self.remembered();
            if remembered.len() >= MAX_REMEMBERED {
                remembered.pop_front();
            }
            remembered.push_back((lease.key.clone(), lease.fence, lease.token.0));
        }
    }

    /// Whether an outcome write of `lease` was answered unconfirmed and not settled since.
    pub(crate) fn was_unconfirmed(&self, lease: &Lease) -> bool {
        let remembered = self.remembered();
        remembered
            .iter()
            .any(|(k, f, t)| *f == lease.fence && *t == lease.token.0 && *k == lease.key)
    }

    /// Forgets `write` once it is confirmed or refused.
    pub(crate) fn settled(&self, write: &Write) {
        if let Some(lease) = write.outcome_lease() {
            let mut remembered = self.remembered();
            remembered
                .retain(|(k, f, t)| !(*f == lease.fence && *t == lease.token.0 && *k == lease.key));
        }
    }

    fn remembered(&self) -> std::sync::MutexGuard<'_, VecDeque<(ScopedKey, i64, i64)>> {
        self.unconfirmed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A write permit if one is free now.
    pub(crate) fn try_permit(&self) -> Option<OwnedSemaphorePermit> {
        self.permits.clone().try_acquire_owned().ok()
    }

    /// A write permit, waiting up to the acquire timeout.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when none came free in time.
    pub(crate) async fn permit(&self) -> Result<OwnedSemaphorePermit, StoreError> {
        let acquire = self.permits.clone().acquire_owned();
        match tokio::time::timeout(self.acquire_timeout, acquire).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(self.busy()),
        }
    }

    /// A write permit for a new key: as [`SyncGuard::permit`], but refused as soon as new
    /// keys are (a stall seen while it waited).
    ///
    /// # Errors
    /// [`StoreError::Refused`] once new keys are refused; [`StoreError::Unavailable`] when
    /// no permit came free in time.
    pub(crate) async fn permit_for_new_key(&self) -> Result<OwnedSemaphorePermit, StoreError> {
        let refused = self.refused.notified();
        tokio::pin!(refused);
        refused.as_mut().enable();
        self.refuse_if_refusing()?;
        let acquire = self.permits.clone().acquire_owned();
        tokio::select! {
            permit = tokio::time::timeout(self.acquire_timeout, acquire) => match permit {
                Ok(Ok(permit)) => Ok(permit),
                _ => Err(self.busy()),
            },
            () = refused => {
                self.refuse_if_refusing()?;
                Err(self.busy())
            }
        }
    }

    fn busy(&self) -> StoreError {
        StoreError::Unavailable(Box::new(SyncError::Busy(self.acquire_timeout)))
    }
}

impl PostgresStore {
    /// This store with `sync` as its requirement state (`None`: not required).
    pub(crate) fn with_sync(mut self, sync: Option<Arc<SyncGuard>>) -> Self {
        self.sync = sync;
        self
    }

    /// This store, newly connected with `options`, with their requirement of synchronous
    /// replication: its state starts from one read of the server (new keys are refused
    /// from the start if no synchronous standby is connected).
    ///
    /// # Errors
    /// If that read fails, or finds `synchronous_standby_names` empty (an error naming it).
    pub(crate) async fn requiring_sync(self, options: &PostgresOptions) -> Result<Self> {
        let Some(guard) = SyncGuard::new(options) else {
            return Ok(self);
        };
        let facts = self.read_server().await?;
        if facts.required() == 0 {
            let reason = "empty on the server: commits would not wait for any standby";
            return Err(SyncError::session("synchronous_standby_names", reason));
        }
        guard.set(refusal(&facts));
        Ok(self.with_sync(Some(guard)))
    }
}
