//! `/v1/store/...`: the store primitives, for [`idemgate_client::KeyServiceStore`] (a
//! gateway or tower layer that keeps its own policy). Keys are scoped by the caller's
//! namespace exactly as the public API's are; no decision is made here.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::Json;
use idemgate_client::store_wire::*;
use idemgate_client::wire::Problem;
use idemgate_core::{admin, IdempotencyStore, InsertOutcome, InsertRequest, ScopedKey};

use crate::auth::Caller;
use crate::problem::{ApiError, JsonBody};
use crate::validate;
use crate::KeyService;

type Shared<St> = State<Arc<KeyService<St>>>;

/// Longest lease or record TTL through the store API, in ms (the public bounds' maxima).
const MAX_LEASE_MS: u64 = idemgate_client::wire::MAX_LEASE_TTL_MS;
const MAX_RECORD_MS: u64 = idemgate_client::wire::MAX_RECORD_TTL_MS;

fn ttl(field: &str, ms: u64, max: u64) -> Result<Duration, ApiError> {
    validate::ttl(field, Some(ms), 1, max, Duration::ZERO)
}

fn lease(caller: &Caller, l: &StoreLease) -> Result<idemgate_core::Lease, ApiError> {
    let key = validate::store_key(&caller.namespace, "lease.key", &l.key)?;
    l.to_core(key)
        .map_err(|e| ApiError::invalid("lease.token", e))
}

fn token(field: &str, t: &str) -> Result<idemgate_core::LeaseToken, ApiError> {
    parse_token(t).map_err(|e| ApiError::invalid(field, e))
}

/// Documents each `POST /v1/store/...` path (`name: path, body => answer, summary`) in the
/// OpenAPI document, on a stand-in function `name`.
macro_rules! store_paths {
    ($($name:ident: $path:literal, $body:ty => $answer:ty, $doc:literal;)*) => {$(
        #[doc = $doc]
        #[utoipa::path(post, path = $path, tag = "store", request_body = $body,
            security(("bearer" = [])),
            responses(
                (status = 200, description = "Done", body = $answer),
                (status = 400, description = "`invalid-request`", body = Problem, content_type = "application/problem+json"),
                (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
                (status = 409, description = "`lease-lost`", body = Problem, content_type = "application/problem+json"),
                (status = 503, description = "`store-unavailable`", body = Problem, content_type = "application/problem+json"),
            ))]
        #[allow(dead_code)]
        fn $name() {}
    )*};
}

store_paths! {
    doc_insert: "/v1/store/insert_or_get", InsertBody => InsertAnswer, "Insert-or-get.";
    doc_take_over: "/v1/store/take_over", TakeOverBody => TakeOverAnswer, "Take over.";
    doc_renew: "/v1/store/renew", RenewBody => RenewAnswer, "Renew.";
    doc_complete: "/v1/store/complete", CompleteBody => Done, "Complete.";
    doc_fail: "/v1/store/fail", LeaseBody => Done, "Fail.";
    doc_release: "/v1/store/release", LeaseBody => Done, "Release.";
    doc_get: "/v1/store/get", GetBody => GetAnswer, "Get.";
    doc_purge: "/v1/store/purge", PurgeBody => PurgeAnswer, "Purge (admin clients).";
}

/// `POST /v1/store/insert_or_get`.
pub async fn insert_or_get<St: IdempotencyStore>(
    State(s): Shared<St>,
    caller: Caller,
    JsonBody(b): JsonBody<InsertBody>,
) -> Result<Json<InsertAnswer>, ApiError> {
    let key = validate::store_key(&caller.namespace, "key", &b.key)?;
    let req = InsertRequest {
        key,
        fingerprint: b
            .fingerprint
            .to_core()
            .map_err(|e| ApiError::invalid("fingerprint.digest", e))?,
        token: token("token", &b.token)?,
        lease_ttl: ttl("lease_ttl_ms", b.lease_ttl_ms, MAX_LEASE_MS)?,
        record_ttl: ttl("record_ttl_ms", b.record_ttl_ms, MAX_RECORD_MS)?,
    };
    let found = s.call(s.lifecycle.store().insert_or_get(&req)).await?;
    Ok(Json(match found {
        InsertOutcome::Inserted(l) => InsertAnswer::Inserted {
            lease: StoreLease::from_core(&l, b.key),
        },
        InsertOutcome::Existing { record, now } => InsertAnswer::Existing {
            record: StoreRecord::from_core(&record, b.key),
            now,
        },
    }))
}

/// `POST /v1/store/take_over`.
pub async fn take_over<St: IdempotencyStore>(
    State(s): Shared<St>,
    caller: Caller,
    JsonBody(b): JsonBody<TakeOverBody>,
) -> Result<Json<TakeOverAnswer>, ApiError> {
    let key = validate::store_key(&caller.namespace, "seen.key", &b.seen.key)?;
    let seen = b
        .seen
        .to_core(key)
        .map_err(|e| ApiError::invalid(format!("seen.{}", e.split(':').next().unwrap_or("")), e))?;
    let t = token("token", &b.token)?;
    let lease_ttl = ttl("lease_ttl_ms", b.lease_ttl_ms, MAX_LEASE_MS)?;
    let lease = s
        .call(s.lifecycle.store().take_over(&seen, t, lease_ttl))
        .await?;
    Ok(Json(TakeOverAnswer {
        lease: lease.map(|l| StoreLease::from_core(&l, b.seen.key)),
    }))
}

/// `POST /v1/store/renew`.
pub async fn renew<St: IdempotencyStore>(
    State(s): Shared<St>,
    caller: Caller,
    JsonBody(b): JsonBody<RenewBody>,
) -> Result<Json<RenewAnswer>, ApiError> {
    let l = lease(&caller, &b.lease)?;
    let lease_ttl = ttl("lease_ttl_ms", b.lease_ttl_ms, MAX_LEASE_MS)?;
    let expires_at = s.call(s.lifecycle.store().renew(&l, lease_ttl)).await?;
    Ok(Json(RenewAnswer { expires_at }))
}

/// `POST /v1/store/complete`.
pub async fn complete<St: IdempotencyStore>(
    State(s): Shared<St>,
    caller: Caller,
    JsonBody(b): JsonBody<CompleteBody>,
) -> Result<Json<Done>, ApiError> {
    let l = lease(&caller, &b.lease)?;
    let r = b
        .response
        .to_core()
        .map_err(|e| ApiError::invalid("response", e))?;
    idemgate_core::integrity::check_storable(&r).map_err(|e| ApiError::invalid("response", e))?;
    if let Some((name, _)) = r.headers.iter().find(|(n, _)| admin::is_reserved(n)) {
        let why = format!("header `{name}` is reserved for the audit entry of `idemgate resolve`");
        return Err(ApiError::invalid("response", why));
    }
    s.call(s.lifecycle.store().complete(&l, &r)).await?;
    Ok(Json(Done { ok: true }))
}

/// `POST /v1/store/fail`.
pub async fn fail<St: IdempotencyStore>(
    State(s): Shared<St>,
    caller: Caller,
    JsonBody(b): JsonBody<LeaseBody>,
) -> Result<Json<Done>, ApiError> {
    let l = lease(&caller, &b.lease)?;
    s.call(s.lifecycle.store().fail(&l)).await?;
    Ok(Json(Done { ok: true }))
}

/// `POST /v1/store/release`.
pub async fn release<St: IdempotencyStore>(
    State(s): Shared<St>,
    caller: Caller,
    JsonBody(b): JsonBody<LeaseBody>,
) -> Result<Json<Done>, ApiError> {
    let l = lease(&caller, &b.lease)?;
    s.call(s.lifecycle.store().release(&l)).await?;
    Ok(Json(Done { ok: true }))
}

/// `POST /v1/store/get`.
pub async fn get<St: IdempotencyStore>(
    State(s): Shared<St>,
    caller: Caller,
    JsonBody(b): JsonBody<GetBody>,
) -> Result<Json<GetAnswer>, ApiError> {
    let key: ScopedKey = validate::store_key(&caller.namespace, "key", &b.key)?;
    let record = s.call(s.lifecycle.store().get(&key)).await?;
    Ok(Json(GetAnswer {
        record: record.map(|r| StoreRecord::from_core(&r, b.key)),
    }))
}

/// `POST /v1/store/purge`: admin clients only (expired records of every namespace).
pub async fn purge<St: IdempotencyStore>(
    State(s): Shared<St>,
    caller: Caller,
    JsonBody(b): JsonBody<PurgeBody>,
) -> Result<Json<PurgeAnswer>, ApiError> {
    if !caller.admin {
        return Err(ApiError::forbidden("purging"));
    }
    let batch = NonZeroU32::new(b.batch)
        .filter(|n| n.get() <= 100_000)
        .ok_or_else(|| ApiError::invalid("batch", "must be between 1 and 100000"))?;
    let purged = s.call(s.lifecycle.store().purge_expired(batch)).await?;
    Ok(Json(PurgeAnswer { purged }))
}

/// `GET /v1/store/ping`: the store answers.
#[utoipa::path(get, path = "/v1/store/ping", tag = "store", security(("bearer" = [])),
    responses(
        (status = 200, description = "The store answers", body = Done),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`store-unavailable`", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn ping<St: IdempotencyStore>(
    State(s): Shared<St>,
    _caller: Caller,
) -> Result<Json<Done>, ApiError> {
    s.call(s.lifecycle.store().ping()).await?;
    Ok(Json(Done { ok: true }))
}
