//! `/v1/renew`, `/v1/complete`, `/v1/fail`, `/v1/release`: fenced writes. A stale or unknown
//! lease is `409 lease-lost` and changes nothing; repeating a `complete` (or `fail`) whose
//! write already landed, with the same lease and response, succeeds.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use idemgate_client::wire::*;
use idemgate_core::events::{EventKind, KeyEvent, KeyId, Released};
use idemgate_core::lifecycle::RoutePlan;
use idemgate_core::{IdempotencyStore, Lease, RecordState, ScopedKey, StoreError, StoredResponse};

use crate::api::{lease_info, store_error};
use crate::auth::Caller;
use crate::problem::{ApiError, JsonBody};
use crate::validate;
use crate::KeyService;

type Shared<St> = State<Arc<KeyService<St>>>;

fn held(
    caller: &Caller,
    scope: &str,
    principal: &str,
    key: &str,
    lease: &LeaseRef,
) -> Result<Lease, ApiError> {
    let key = validate::public_key(&caller.namespace, scope, principal, key)?;
    validate::lease(&key, lease)
}

fn landed(state: &str, repeated: bool) -> Json<OutcomeResponse> {
    Json(OutcomeResponse {
        state: state.into(),
        repeated,
    })
}

/// `POST /v1/renew`.
#[utoipa::path(post, path = "/v1/renew", tag = "keys", request_body = RenewRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The lease with its new expiry", body = RenewResponse),
        (status = 400, description = "`invalid-request`", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`lease-lost`: stale or unknown lease", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`store-unavailable`", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn renew<St: IdempotencyStore>(
    State(s): Shared<St>,
    caller: Caller,
    JsonBody(req): JsonBody<RenewRequest>,
) -> Result<Json<RenewResponse>, ApiError> {
    let lease = held(&caller, &req.scope, &req.principal, &req.key, &req.lease)?;
    let ttl = validate::ttl(
        "lease_ttl_ms",
        req.lease_ttl_ms,
        MIN_LEASE_TTL_MS,
        MAX_LEASE_TTL_MS,
        RoutePlan::default().lease_ttl,
    )?;
    let expires_at = s.call(s.lifecycle.store().renew(&lease, ttl)).await?;
    let lease = lease_info(&Lease {
        expires_at,
        ..lease
    });
    Ok(Json(RenewResponse { lease }))
}

/// `POST /v1/complete`.
#[utoipa::path(post, path = "/v1/complete", tag = "keys", request_body = CompleteRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Stored (or already stored with this lease and response)", body = OutcomeResponse),
        (status = 400, description = "`invalid-request`", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`lease-lost`: stale or unknown lease", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "`request-too-large`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`store-unavailable`", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn complete<St: IdempotencyStore>(
    State(s): Shared<St>,
    caller: Caller,
    JsonBody(req): JsonBody<CompleteRequest>,
) -> Result<Json<OutcomeResponse>, ApiError> {
    let lease = held(&caller, &req.scope, &req.principal, &req.key, &req.lease)?;
    let response = validate::response(&req.response)?;
    // Sealed at rest when the key service has keys; a response already sealed by an
    // `idemgate://` gateway goes through `/v1/store/complete` instead.
    let sealed = s.lifecycle.seal_response(&lease, response.clone());
    let written = s.timed(s.lifecycle.store().complete(&lease, &sealed)).await;
    let answer = s
        .settle(written, &lease, RecordState::Completed, Some(&response))
        .await?;
    s.tell(&caller, &req.principal, &lease, None, &answer);
    Ok(answer)
}

/// `POST /v1/fail`.
#[utoipa::path(post, path = "/v1/fail", tag = "keys", request_body = LeaseRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Marked failed (or already failed under this lease)", body = OutcomeResponse),
        (status = 400, description = "`invalid-request`", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`lease-lost`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`store-unavailable`", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn fail<St: IdempotencyStore>(
    State(s): Shared<St>,
    caller: Caller,
    JsonBody(req): JsonBody<LeaseRequest>,
) -> Result<Json<OutcomeResponse>, ApiError> {
    let lease = held(&caller, &req.scope, &req.principal, &req.key, &req.lease)?;
    let written = s.timed(s.lifecycle.store().fail(&lease)).await;
    let answer = s.settle(written, &lease, RecordState::Failed, None).await?;
    s.tell(&caller, &req.principal, &lease, None, &answer);
    Ok(answer)
}

/// `POST /v1/release`: the operation did not run; the key may be used again. Under a
/// take-over's lease (fence above 1) nothing is written and the answer's state is
/// `left-to-lapse`: the holder it took over from may have run, so the key is taken over
/// again once this lease lapses, never run afresh.
#[utoipa::path(post, path = "/v1/release", tag = "keys", request_body = ReleaseRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Released; `left-to-lapse` under a take-over's lease", body = OutcomeResponse),
        (status = 400, description = "`invalid-request`", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`lease-lost` (also for a release repeated after it landed)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`store-unavailable`", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn release<St: IdempotencyStore>(
    State(s): Shared<St>,
    caller: Caller,
    JsonBody(req): JsonBody<ReleaseRequest>,
) -> Result<Json<OutcomeResponse>, ApiError> {
    let lease = held(&caller, &req.scope, &req.principal, &req.key, &req.lease)?;
    let released = validate::released(req.status, req.retry_after_ms)?;
    if lease.fence > 1 {
        return s.left_to_lapse(&lease).await;
    }
    s.call(s.lifecycle.store().release(&lease)).await?;
    // Callers waiting on the key (`wait_ms`): one acquires it.
    s.lifecycle.outcome_landed(&lease, Some(released)).await;
    let answer = landed("released", false);
    s.tell(&caller, &req.principal, &lease, Some(released), &answer);
    Ok(answer)
}

impl<St: IdempotencyStore> KeyService<St> {
    /// Tells the callers of `/v1/wait` in `caller`'s namespace that `lease`'s key changed
    /// (`released`: released, with the status and `Retry-After` ms its caller answered),
    /// unless `answer` repeats an earlier write. The key id is [`KeyId::of`] over the
    /// caller's own principal, scope and key, which the caller can compute.
    fn tell(
        &self,
        caller: &Caller,
        principal: &str,
        lease: &Lease,
        released: Option<(u16, Option<u64>)>,
        answer: &OutcomeResponse,
    ) {
        if answer.repeated {
            return;
        }
        let kind = match released {
            Some((status, retry_after_ms)) => EventKind::Released(Released {
                lease: Released::lease_id(lease),
                status,
                retry_after_ms,
            }),
            None => EventKind::Written,
        };
        let key = ScopedKey {
            principal: principal.to_owned(),
            ..lease.key.clone()
        };
        let event = KeyEvent {
            key: KeyId::of(&key),
            kind,
        };
        self.events.publish(&caller.namespace, &event);
    }

    /// The answer to a release under a take-over's lease (fence above 1): nothing is
    /// written, since the holder it took over from may have run. The record stays
    /// `in_progress` until this lease lapses, and the next acquire takes it over again
    /// (`takeover: true`), never a fresh run (found by the protocol model,
    /// `crates/idemgate-model`). `lease-lost` when the record no longer carries the lease.
    async fn left_to_lapse(&self, lease: &Lease) -> Result<Json<OutcomeResponse>, ApiError> {
        let record = self.call(self.lifecycle.store().get(&lease.key)).await?;
        match record {
            Some(r)
                if r.state == RecordState::InProgress
                    && r.fence == lease.fence
                    && r.lease_token == Some(lease.token) =>
            {
                Ok(landed("left-to-lapse", false))
            }
            _ => Err(store_error(StoreError::LeaseLost)),
        }
    }

    /// The answer to a `complete` (`state` completed, with `response`) or `fail` write:
    /// landed, or after `lease-lost` landed earlier when the record already holds this very
    /// outcome under this lease's fence (the caller's earlier write landed and its answer
    /// was lost).
    async fn settle(
        &self,
        written: Result<(), StoreError>,
        lease: &Lease,
        state: RecordState,
        response: Option<&StoredResponse>,
    ) -> Result<Json<OutcomeResponse>, ApiError> {
        let name = state.as_str();
        match written {
            Ok(()) => {
                self.lifecycle.outcome_landed(lease, None).await;
                return Ok(landed(name, false));
            }
            Err(StoreError::LeaseLost) => {}
            Err(e) => return Err(store_error(e)),
        }
        let record = self.call(self.lifecycle.store().get(&lease.key)).await?;
        match record {
            Some(r) if r.state == state && r.fence == lease.fence => {
                // A sealed response is compared in clear (each seal has its own nonce).
                let stored = self.lifecycle.open_response(r).map_err(store_error)?;
                match stored.as_ref() == response {
                    true => Ok(landed(name, true)),
                    false => Err(store_error(StoreError::LeaseLost)),
                }
            }
            _ => Err(store_error(StoreError::LeaseLost)),
        }
    }
}
