//! Completing a key inside the handler's PostgreSQL transaction (features `axum` and
//! `postgres`): [`LeaseHandle::complete_in`].

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::StatusCode;
use http_body_util::BodyExt;
use idemgate_core::lifecycle::Outcome;
use idemgate_core::seal::Keyring;
use idemgate_core::{StoreError, StoredResponse};
use idemgate_postgres::PostgresStore;
use sqlx::PgConnection;

use crate::glue::{is_streaming, storable};
use crate::layer::IdempotencyLayer;
use crate::lease::LeaseHandle;
use crate::policy::StatusAction;
use crate::replay::headers_to_store;

/// Why [`LeaseHandle::complete_in`] did not complete the record. In every case nothing was
/// written: roll the transaction back (or return an error, which drops it).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompleteError {
    /// The layer's store is not a [`PostgresStore`], or the layer was built without
    /// [`IdempotencyLayer::with_transactions`].
    #[error("the idempotency layer's store is not PostgreSQL (or its layer was built without `with_transactions`)")]
    NotPostgres,
    /// The record was already completed through this lease.
    #[error("the record was already completed")]
    AlreadyCompleted,
    /// The route's status rules do not store this status (a release or fail status, such
    /// as `5xx`): roll back and return the error instead; the layer records it.
    #[error("status {0} is not stored by the route's status rules")]
    NotStored(u16),
    /// The response body failed, or the response cannot be stored even without its body
    /// (a status outside 200-599).
    #[error("the response cannot be stored: {0}")]
    NotStorable(String),
    /// The store refused or failed: [`StoreError::LeaseLost`] when the lease is stale
    /// (taken over, released), else the store's failure.
    #[error("completing the record failed: {0}")]
    Store(#[source] StoreError),
}

impl IntoResponse for CompleteError {
    /// `500` `internal`: the handler's transaction did not commit, nothing is known to have
    /// run; the record stays in progress under its lease (see [`LeaseHandle::complete_in`]).
    fn into_response(self) -> Response {
        tracing::warn!(error = %self, "completing the idempotency record in the transaction failed");
        IntoResponse::into_response(crate::IdempotencyRejection::Internal)
    }
}

/// The store a lease completes through inside the handler's transaction, and the keys that
/// seal what it stores ([`IdempotencyLayer::with_keyring`]).
#[derive(Clone, Debug)]
pub(crate) struct TxStore {
    store: std::sync::Arc<PostgresStore>,
    keyring: Option<std::sync::Arc<Keyring>>,
}

impl TxStore {
    /// Seals with `keyring` from now on.
    pub(crate) fn set_keyring(&mut self, keyring: Option<std::sync::Arc<Keyring>>) {
        self.keyring = keyring;
    }
}

impl IdempotencyLayer<PostgresStore> {
    /// This layer with completion inside the handler's transaction enabled: each lease
    /// carries the store, so [`LeaseHandle::complete_in`] can complete the record through
    /// it. Without it `complete_in` answers [`CompleteError::NotPostgres`].
    #[must_use]
    pub fn with_transactions(mut self) -> Self {
        self.ctx.transactional = Some(TxStore {
            store: self.lifecycle().store().clone(),
            keyring: self.lifecycle().shared_keyring(),
        });
        self
    }
}

impl LeaseHandle {
    /// Completes the record with `response` inside the caller's transaction `conn` (pass
    /// `&mut *tx`), before its commit, so the record and the business rows commit together
    /// or not at all; returns the response to send. The stored response goes through the
    /// layer's header filter (no hop-by-hop headers, `set-cookie`, `date` or the route's
    /// `replay_deny_headers`), and the lease is marked completed, so the layer writes no
    /// outcome of its own. As in the layer, a `304`, a streaming response or one over the
    /// route's `max_stored_response_bytes` is completed as not replayable (retries get
    /// `410`); the client still gets it whole.
    ///
    /// If the transaction then rolls back (an error, or the process dies before `COMMIT`),
    /// neither is stored: the key stays `in_progress` under its lease, retries get `409`
    /// until the lease lapses (nobody renews it once the handler returned), then, on a
    /// route with `lease_expired = Takeover`, one retry takes over and runs once more,
    /// which is safe because the first attempt never committed.
    ///
    /// # Errors
    /// [`CompleteError`]: nothing was written; roll back.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped midway, the completion may be written in `conn`; drop the
    /// transaction too (it rolls back).
    pub async fn complete_in(
        &self,
        conn: &mut PgConnection,
        response: impl IntoResponse,
    ) -> Result<Response, CompleteError> {
        if self.is_completed() {
            return Err(CompleteError::AlreadyCompleted);
        }
        let tx = self.transactional().ok_or(CompleteError::NotPostgres)?;
        let route = self.route();
        let (parts, body) = response.into_response().into_parts();
        if route.action_for(parts.status, &parts.headers) != StatusAction::Store {
            return Err(CompleteError::NotStored(parts.status.as_u16()));
        }
        // The body of a handler's response is in memory already.
        let body = body
            .collect()
            .await
            .map_err(|e| CompleteError::NotStorable(e.to_string()))?
            .to_bytes();
        // Kept as the layer keeps responses: a `304`, a stream or a body over the cap is
        // completed as not replayable (retries get `410`), never left to run again.
        let replay = parts.status != StatusCode::NOT_MODIFIED
            && !is_streaming(&parts.headers)
            && body.len() <= route.max_stored_response_bytes;
        let stored = StoredResponse {
            status: parts.status.as_u16(),
            headers: headers_to_store(&parts.headers, &route.replay_deny_headers),
            body: if replay { body.clone() } else { Bytes::new() },
            replayable: replay,
            sealed_by: None,
        };
        let Outcome::Complete(stored) = storable(&self.lease().key.route, stored) else {
            let status = format!("status {}", parts.status);
            return Err(CompleteError::NotStorable(status));
        };
        let lease = self.lease();
        let stored = match &tx.keyring {
            Some(ring) => ring.seal(&lease.key, lease.fence, &stored),
            None => stored,
        };
        tx.store
            .complete_using(conn, lease, &stored)
            .await
            .map_err(CompleteError::Store)?;
        self.mark_completed();
        Ok(Response::from_parts(parts, axum::body::Body::from(body)))
    }
}
