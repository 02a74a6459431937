//! An operator's answer for a stuck key: the outcome established outside idemgate (the
//! upstream's own records show that the payment happened), written as the record's
//! completion, so retries get that answer instead of `outcome-unknown`.
//!
//! [`resolve`] is two store primitives: [`IdempotencyStore::take_over`] of the record as the
//! operator was shown it (a compare-and-set on its fence, state and lease: a record that
//! changed since is kept), then [`IdempotencyStore::complete`] under that new lease, one
//! fence higher. The original holder's lease is stale from the takeover on, so a late
//! outcome from it is refused with [`StoreError::LeaseLost`] instead of overwriting the
//! operator's answer.
//!
//! The record says who resolved it in a reserved stored header, [`RESOLVED_HEADER`] (a
//! [`Resolution`] as JSON), sealed by the response checksum like every stored header and
//! never replayed; a not-replayable answer keeps the operator's text for the `410` in
//! [`RESOLVED_DETAIL_HEADER`] (such a record holds no body).
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use bytes::Bytes;
//! use idemgate_core::admin::{resolve, resolution_of, Operator, OperatorOutcome};
//! use idemgate_core::testing::{fp, request, unique_key};
//! use idemgate_core::{now_millis, IdempotencyStore, MemoryStore, RecordState};
//! use std::time::Duration;
//!
//! let store = MemoryStore::new();
//! let key = unique_key("alice");
//! let req = request(&key, fp(1), Duration::from_millis(10), Duration::from_secs(60));
//! store.insert_or_get(&req).await.unwrap(); // the holder dies here
//! tokio::time::sleep(Duration::from_millis(20)).await;
//! let stuck = store.get(&key).await.unwrap().unwrap();
//! let outcome = OperatorOutcome::Replayable {
//!     status: 201,
//!     headers: vec![("content-type".into(), Bytes::from_static(b"application/json"))],
//!     body: Bytes::from_static(b"{\"id\":\"pay_1\"}"),
//! };
//! let by = Operator { name: "alice".into(), uid: None, host: None };
//! let done = resolve(&store, &stuck, now_millis(), &outcome, &by).await.unwrap();
//! let record = store.get(&key).await.unwrap().unwrap();
//! assert_eq!((record.state, record.fence), (RecordState::Completed, stuck.fence + 1));
//! let stored = record.response.unwrap();
//! assert_eq!(resolution_of(&stored.headers), Some(done.resolution));
//! # });
//! ```

use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::integrity::check_storable;
use crate::lifecycle::hash_key;
use crate::lifecycle::RoutePlan;
use crate::record::{IdempotencyRecord, LeaseToken, RecordState, StoredResponse, UnixMillis};
use crate::store::{IdempotencyStore, StoreError};

/// The stored header that marks a record resolved by an operator: a [`Resolution`] as
/// JSON. Reserved: never stored from an upstream's response, never replayed.
pub const RESOLVED_HEADER: &str = "idempotent-resolved";

/// The stored header holding the operator's text for a not-replayable resolution (what
/// retries read in the `410`'s `detail`). Reserved like [`RESOLVED_HEADER`].
pub const RESOLVED_DETAIL_HEADER: &str = "idempotent-resolved-detail";

/// The lease an operator's takeover holds until its completion lands (a few ms later). A
/// gateway retry in between gets `409`.
pub const RESOLVE_LEASE_TTL: Duration = Duration::from_secs(30);

/// The longest operator text [`OperatorOutcome::NotReplayable`] takes, in bytes.
pub const MAX_DETAIL_BYTES: usize = 1024;

/// The outcome an operator established for a stuck key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OperatorOutcome {
    /// It ran and its answer is known: retries get this response, replayed.
    Replayable {
        /// The HTTP status (`200`–`599`, not `304`).
        status: u16,
        /// Response headers, in order (reserved `idempotent-*` names are refused).
        headers: Vec<(String, Bytes)>,
        /// Response body.
        body: Bytes,
    },
    /// It ran but its answer cannot be given back: retries get `410` with `detail`.
    NotReplayable {
        /// The HTTP status the operation had (`200`–`599`).
        status: u16,
        /// What the caller should know (at most [`MAX_DETAIL_BYTES`], one line).
        detail: String,
    },
}

/// Who resolved a key: the audit entry's "who".
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operator {
    /// The name the operator gave, or the OS user running the command.
    #[serde(rename = "by")]
    pub name: String,
    /// The OS user id of the process that wrote it, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// The host the command ran on, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// The audit entry a resolved record carries in [`RESOLVED_HEADER`]: who, when, the key's
/// log hash, and the state it was resolved from and to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolution {
    /// Who.
    #[serde(flatten)]
    pub by: Operator,
    /// When: the store's clock at the takeover, ms since the epoch.
    pub at: UnixMillis,
    /// The key's keyed hash, as the gateways' logs show it ([`crate::loghash::key_hash`]).
    pub key_hash: String,
    /// The state before: `in_progress` (stuck) or `failed`.
    pub from_state: String,
    /// The fence before (the resolved record has this + 1).
    pub from_fence: i64,
    /// The status recorded.
    pub status: u16,
    /// Whether retries get the response (`true`) or `410` (`false`).
    pub replayable: bool,
}

/// Why a record cannot be resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotResolvable {
    /// It is completed: retries already get its stored answer.
    #[error("the record is completed: retries already get its stored answer")]
    Completed,
    /// Past its `expires_at`: retries already treat the key as new.
    #[error("the record has expired: retries already treat the key as new")]
    Expired,
    /// A live lease: a gateway is working on it (store clock, ms).
    #[error("the record has a live lease: a gateway is working on it (wait for its outcome, or for the lease to lapse, and inspect again)")]
    LeaseLive {
        /// When the lease lapses unless renewed.
        until: UnixMillis,
    },
}

/// Why [`resolve`] wrote nothing, or not all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// The record may not be resolved ([`check_resolvable`]); nothing was written.
    #[error("{0}")]
    Refused(NotResolvable),
    /// The outcome cannot be stored (status, a header, size); nothing was written.
    #[error("the outcome cannot be stored: {0}")]
    Unstorable(String),
    /// The record changed since it was read (renewed, completed, taken over, released):
    /// nothing was written and the record is kept as it now is.
    #[error("the record changed since it was shown and was kept; inspect it again")]
    Changed,
    /// The takeover landed but the completion was refused: the operator's lease was taken
    /// over in between (it lapsed). The record is the new holder's.
    #[error("the record was taken over between the operator's takeover and completion; inspect it again")]
    LeaseLost,
    /// A store error. After the takeover, the record stays `in_progress` under the
    /// operator's lease until it lapses ([`RESOLVE_LEASE_TTL`]); resolve again then.
    #[error("store error")]
    Store(#[source] StoreError),
}

/// What [`resolve`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The record's fence now (the one it was shown with, + 1).
    pub fence: i64,
    /// The audit entry stored with it.
    pub resolution: Resolution,
    /// The response stored (the operator's, with the reserved headers).
    pub response: StoredResponse,
}

/// Whether `record`, read at `now` (store clock), may be resolved: `in_progress` with a
/// lapsed lease (a missing lease counts as live until `created_at` + the default
/// `max_lease`, as the engine reads it), or `failed`, and not expired.
///
/// # Errors
/// The reason it may not.
pub fn check_resolvable(record: &IdempotencyRecord, now: UnixMillis) -> Result<(), NotResolvable> {
    if record.expires_at <= now {
        return Err(NotResolvable::Expired);
    }
    match record.state {
        RecordState::Completed => Err(NotResolvable::Completed),
        RecordState::Failed => Ok(()),
        RecordState::InProgress => {
            let max_lease = RoutePlan::default().max_lease.as_millis() as i64;
            let until = record
                .lease_expires_at
                .unwrap_or_else(|| record.created_at.saturating_add(max_lease));
            match until > now {
                true => Err(NotResolvable::LeaseLive { until }),
                false => Ok(()),
            }
        }
    }
}

/// Records `outcome` as the completion of `seen` (read at `now`, store clock): a takeover
/// of `seen` as read (fence + 1, a [`RESOLVE_LEASE_TTL`] lease), then a completion under
/// that lease, with the [`Resolution`] naming `by`. The holder of `seen`'s lease can no
/// longer write: its outcome is refused with [`StoreError::LeaseLost`].
///
/// # Errors
/// See [`ResolveError`]: refused or unstorable (nothing written), changed since read
/// (nothing written), lost between the two writes, or a store error.
pub async fn resolve<S: IdempotencyStore>(
    store: &S,
    seen: &IdempotencyRecord,
    now: UnixMillis,
    outcome: &OperatorOutcome,
    by: &Operator,
) -> Result<Resolved, ResolveError> {
    resolve_sealed(store, seen, (now, outcome, by), None).await
}

/// [`resolve`] for gateways that seal responses at rest: the stored response is sealed
/// with `keyring` ([`crate::seal`]), as a gateway with those keys would store it;
/// [`Resolved::response`] is the response in clear.
///
/// # Errors
/// As [`resolve`].
pub async fn resolve_sealed<S: IdempotencyStore>(
    store: &S,
    seen: &IdempotencyRecord,
    (now, outcome, by): (UnixMillis, &OperatorOutcome, &Operator),
    keyring: Option<&crate::seal::Keyring>,
) -> Result<Resolved, ResolveError> {
    check_resolvable(seen, now).map_err(ResolveError::Refused)?;
    // Checked before the takeover, so a refused outcome leaves the record untouched.
    sealed(seen, outcome, by, now)?;
    let lease = store
        .take_over(seen, LeaseToken::random(), RESOLVE_LEASE_TTL)
        .await
        .map_err(ResolveError::Store)?
        .ok_or(ResolveError::Changed)?;
    // The store's clock at the takeover: the lease it granted ends RESOLVE_LEASE_TTL later.
    let at = lease.expires_at - RESOLVE_LEASE_TTL.as_millis() as i64;
    let (resolution, response) = sealed(seen, outcome, by, at)?;
    let stored = match keyring {
        Some(ring) => ring.seal(&lease.key, lease.fence, &response),
        None => response.clone(),
    };
    match store.complete(&lease, &stored).await {
        Ok(()) => Ok(Resolved {
            fence: lease.fence,
            resolution,
            response,
        }),
        Err(StoreError::LeaseLost) => Err(ResolveError::LeaseLost),
        Err(e) => Err(ResolveError::Store(e)),
    }
}

/// The audit entry and the response to store for `outcome`, checked storable.
fn sealed(
    seen: &IdempotencyRecord,
    outcome: &OperatorOutcome,
    by: &Operator,
    at: UnixMillis,
) -> Result<(Resolution, StoredResponse), ResolveError> {
    let (status, replayable) = outcome.status();
    let resolution = Resolution {
        by: by.clone(),
        at,
        key_hash: hash_key(&seen.key),
        from_state: seen.state.as_str().to_owned(),
        from_fence: seen.fence,
        status,
        replayable,
    };
    let audit =
        serde_json::to_string(&resolution).map_err(|e| ResolveError::Unstorable(e.to_string()))?;
    let response = outcome.response(audit).map_err(ResolveError::Unstorable)?;
    Ok((resolution, response))
}

impl OperatorOutcome {
    /// The status, and whether retries get the response.
    pub fn status(&self) -> (u16, bool) {
        match self {
            Self::Replayable { status, .. } => (*status, true),
            Self::NotReplayable { status, .. } => (*status, false),
        }
    }

    /// Checks that the outcome can be stored as a completion (as [`resolve`] does before
    /// it writes anything): a storable status (`304` only when not replayable), headers
    /// that are valid HTTP and not reserved, the size limit, and a detail of one line of at
    /// most [`MAX_DETAIL_BYTES`].
    ///
    /// # Errors
    /// The first rule broken, as a message.
    pub fn check(&self) -> Result<(), String> {
        self.response(String::new()).map(drop)
    }

    /// The response to store, with the audit entry `audit` in [`RESOLVED_HEADER`].
    fn response(&self, audit: String) -> Result<StoredResponse, String> {
        let (status, replayable) = self.status();
        let (mut headers, body) = match self {
            Self::Replayable { headers, body, .. } => {
                if let Some((name, _)) = headers.iter().find(|(n, _)| is_reserved(n)) {
                    return Err(format!("header `{name}` is reserved"));
                }
                (headers.clone(), body.clone())
            }
            Self::NotReplayable { detail, .. } => {
                let detail = detail.trim();
                if detail.is_empty() || detail.len() > MAX_DETAIL_BYTES {
                    let n = detail.len();
                    return Err(format!(
                        "the detail must be 1 to {MAX_DETAIL_BYTES} bytes, not {n}"
                    ));
                }
                let value = Bytes::from(detail.to_owned());
                (
                    vec![(RESOLVED_DETAIL_HEADER.to_owned(), value)],
                    Bytes::new(),
                )
            }
        };
        headers.push((RESOLVED_HEADER.to_owned(), Bytes::from(audit)));
        let response = StoredResponse {
            status,
            headers,
            body,
            replayable,
            sealed_by: None,
        };
        check_storable(&response).map(|()| response)
    }
}

/// True for the names [`resolve`] reserves (any case).
pub fn is_reserved(name: &str) -> bool {
    name.eq_ignore_ascii_case(RESOLVED_HEADER) || name.eq_ignore_ascii_case(RESOLVED_DETAIL_HEADER)
}

fn header<'a>(headers: &'a [(String, Bytes)], name: &str) -> Option<&'a Bytes> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
}

/// The audit entry of a record an operator resolved, from its stored headers; `None` for
/// a record the operation's own outcome completed (or an entry that does not parse).
pub fn resolution_of(headers: &[(String, Bytes)]) -> Option<Resolution> {
    serde_json::from_slice(header(headers, RESOLVED_HEADER)?).ok()
}

/// The operator's text of a not-replayable resolution, from its stored headers.
pub fn resolved_detail(headers: &[(String, Bytes)]) -> Option<String> {
    let value = header(headers, RESOLVED_DETAIL_HEADER)?;
    Some(String::from_utf8_lossy(value).into_owned())
}
