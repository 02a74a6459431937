//! The public API: `/v1/acquire`, `/v1/renew`, `/v1/complete`, `/v1/fail`, `/v1/release`.
//! `acquire` drives the core lifecycle (the decision is made once, in core); the others are
//! fenced store writes.

use std::future::ready;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::Json;
use idemgate_client::store_wire::token_hex;
use idemgate_client::wire::*;
use idemgate_core::lifecycle::{Answer, Begin, InFlightPolicy, RoutePlan};
use idemgate_core::{
    Fingerprint, IdempotencyStore, Lease, LeaseExpiredPolicy, LeaseToken, RecordState, ScopedKey,
    StoreError,
};
use sha2::{Digest, Sha256};

use crate::auth::Caller;
use crate::fingerprint::RequestFingerprint;
use crate::problem::{ApiError, JsonBody};
use crate::validate;
use crate::KeyService;

type Shared<St> = State<Arc<KeyService<St>>>;

/// `POST /v1/acquire`.
#[utoipa::path(post, path = "/v1/acquire", tag = "keys", request_body = AcquireRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The decision", body = AcquireResponse),
        (status = 400, description = "A field breaks a rule (`invalid-request`)", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or unknown token (`unauthorized`)", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body over the limit (`request-too-large`)", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "The record is corrupt (`record-corrupt`)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Store unavailable; nothing was handed out (`store-unavailable`)", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn acquire<St: IdempotencyStore>(
    State(s): Shared<St>,
    caller: Caller,
    JsonBody(req): JsonBody<AcquireRequest>,
) -> Result<Json<AcquireResponse>, ApiError> {
    let key = validate::public_key(&caller.namespace, &req.scope, &req.principal, &req.key)?;
    let fp = RequestFingerprint::from_request(&req)?;
    let plan = plan(&req)?;
    if let Some(a) = &req.attempt {
        validate::text("attempt", a, 128)?;
    }
    let attempt = req.attempt.as_ref().map(|a| attempt_token(&key, a));
    let current = fp.current()?;
    let refingerprint = |v| ready(fp.version(v));
    let begin = match attempt {
        // A lost insert is left for the attempt's retry to find (never released under it).
        Some(token) => {
            s.lifecycle
                .begin_with_token(&key, current, &plan, token, refingerprint)
                .await
        }
        None => s.lifecycle.begin(&key, current, &plan, refingerprint).await,
    };
    let own = match (&begin, attempt) {
        (Begin::Answer(Answer::InFlight { .. }), Some(t)) => s.own_lease(&key, t, current).await?,
        _ => None,
    };
    if let Some(own) = own {
        return Ok(Json(decided(&caller, own)));
    }
    let begin = match begin {
        // Another attempt holds it: with `wait_ms`, wait for its outcome (the call's own
        // future: a caller that hangs up ends it).
        Begin::Answer(Answer::InFlight { .. }) if plan.waits() => {
            let gone = std::future::pending();
            s.lifecycle
                .wait_in_flight(&key, current, &plan, refingerprint, (gone, |_| {}))
                .await
        }
        begin => begin,
    };
    let answer = match begin {
        Begin::Run(holder) => AcquireResponse::Run {
            lease: lease_info(&holder.lease),
            takeover: holder.takeover,
        },
        Begin::Answer(answer) => match answer {
            Answer::InFlight { retry_after_ms } => AcquireResponse::InFlight { retry_after_ms },
            Answer::Released {
                status,
                retry_after_ms,
            } => AcquireResponse::Released {
                status,
                retry_after_ms,
            },
            Answer::Replay(r) => AcquireResponse::Replay {
                response: validate::response_parts(&r),
            },
            Answer::NotReplayable { status, .. } => AcquireResponse::NotKept { status },
            Answer::Mismatch => AcquireResponse::Mismatch,
            Answer::PreviousFailed => AcquireResponse::PreviousFailed,
            Answer::OutcomeUnknown => AcquireResponse::OutcomeUnknown,
            Answer::Corrupt => return Err(ApiError::corrupt()),
            _ => return Err(ApiError::unavailable()),
        },
    };
    Ok(Json(decided(&caller, answer)))
}

/// Counts `answer` under its decision.
fn decided(caller: &Caller, answer: AcquireResponse) -> AcquireResponse {
    metrics::counter!("idempotency_key_service_decisions_total", "client" => caller.name.to_string(), "decision" => decision_name(&answer)).increment(1);
    answer
}

fn decision_name(a: &AcquireResponse) -> &'static str {
    match a {
        AcquireResponse::Run { .. } => "run",
        AcquireResponse::Replay { .. } => "replay",
        AcquireResponse::InFlight { .. } => "in_flight",
        AcquireResponse::Mismatch => "mismatch",
        AcquireResponse::PreviousFailed => "previous_failed",
        AcquireResponse::OutcomeUnknown => "outcome_unknown",
        AcquireResponse::NotKept { .. } => "not_kept",
        AcquireResponse::Released { .. } => "released",
    }
}

fn plan(req: &AcquireRequest) -> Result<RoutePlan, ApiError> {
    // TTLs a request leaves out are the lifecycle's defaults.
    let defaults = RoutePlan::default();
    let lease_ttl = validate::ttl(
        "lease_ttl_ms",
        req.lease_ttl_ms,
        MIN_LEASE_TTL_MS,
        MAX_LEASE_TTL_MS,
        defaults.lease_ttl,
    )?;
    let record_ttl = validate::ttl(
        "record_ttl_ms",
        req.record_ttl_ms,
        MIN_RECORD_TTL_MS,
        MAX_RECORD_TTL_MS,
        defaults.record_ttl,
    )?;
    let wait = match req.wait_ms {
        None | Some(0) => None,
        Some(ms) if ms <= MAX_WAIT_MS => Some(Duration::from_millis(ms)),
        Some(ms) => {
            let why = format!("must be between 0 and {MAX_WAIT_MS} ms, got {ms}");
            return Err(ApiError::invalid("wait_ms", why));
        }
    };
    Ok(RoutePlan {
        lease_ttl,
        record_ttl,
        lease_expired: match req.on_lease_expired {
            None => defaults.lease_expired,
            Some(LeaseExpired::Unknown) => LeaseExpiredPolicy::Unknown,
            Some(LeaseExpired::Takeover) => LeaseExpiredPolicy::Takeover,
            Some(LeaseExpired::Fail) => LeaseExpiredPolicy::Fail,
        },
        retry_failed: req.retry_failed.unwrap_or(defaults.retry_failed),
        // A record whose lease is unreadable blocks for the longest lease anyone may hold,
        // never less.
        max_lease: Duration::from_millis(MAX_LEASE_TTL_MS),
        on_in_flight: match wait {
            Some(_) => InFlightPolicy::Wait,
            None => InFlightPolicy::Conflict,
        },
        max_wait: wait.unwrap_or(defaults.max_wait),
    })
}

/// The lease token of a named attempt: SHA-256 over the record's scoped identity and the
/// attempt id (each length-prefixed), so only that attempt of that record derives it.
fn attempt_token(key: &ScopedKey, attempt: &str) -> LeaseToken {
    let mut h = Sha256::new();
    h.update(b"idemgate-attempt-v1");
    for part in [
        key.principal.as_bytes(),
        key.route.as_bytes(),
        key.key.as_str().as_bytes(),
        attempt.as_bytes(),
    ] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    let mut first = [0; 8];
    first.copy_from_slice(&h.finalize()[..8]);
    LeaseToken(i64::from_be_bytes(first))
}

pub(crate) fn lease_info(l: &Lease) -> LeaseInfo {
    LeaseInfo {
        token: token_hex(l.token),
        fence: l.fence,
        expires_at: l.expires_at,
    }
}

/// The answer for a store failure of a fenced write.
pub(crate) fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::LeaseLost => {
            metrics::counter!("idempotency_lease_lost_total").increment(1);
            ApiError::lease_lost()
        }
        StoreError::Corrupt { detail } => {
            tracing::error!(%detail, "stored record is corrupt");
            ApiError::corrupt()
        }
        e => {
            tracing::warn!(error = %e, "store unavailable");
            ApiError::unavailable()
        }
    }
}

impl<St: IdempotencyStore> KeyService<St> {
    /// Runs one store call under the lifecycle's store deadline.
    pub(crate) async fn timed<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        tokio::time::timeout(self.lifecycle.config().store_timeout, call)
            .await
            .unwrap_or(Err(StoreError::Timeout))
    }

    /// [`KeyService::timed`], with a store error as its problem answer.
    pub(crate) async fn call<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, ApiError> {
        self.timed(call).await.map_err(store_error)
    }

    /// The lease a retried attempt holds: the record is `in_progress` under this attempt's
    /// token and the same fingerprint. Anything else is someone else's.
    async fn own_lease(
        &self,
        key: &ScopedKey,
        token: LeaseToken,
        fp: Fingerprint,
    ) -> Result<Option<AcquireResponse>, ApiError> {
        let record = self.call(self.lifecycle.store().get(key)).await?;
        Ok(record
            .filter(|r| {
                r.state == RecordState::InProgress
                    && r.lease_token == Some(token)
                    && self.lifecycle.same_fingerprint(&r.fingerprint, fp)
            })
            .map(|r| AcquireResponse::Run {
                lease: LeaseInfo {
                    token: token_hex(token),
                    fence: r.fence,
                    expires_at: r.lease_expires_at.unwrap_or(r.created_at),
                },
                takeover: r.fence > 1,
            }))
    }
}
