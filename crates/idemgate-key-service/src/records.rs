//! `GET /v1/records`: one record, for debugging and reconciliation.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::Json;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use idemgate_client::wire::{Problem, RecordView, StoredView};
use idemgate_core::IdempotencyStore;
use serde::Deserialize;

use crate::auth::Caller;
use crate::problem::ApiError;
use crate::validate;
use crate::KeyService;

/// The query of `GET /v1/records`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RecordsQuery {
    /// As acquired.
    scope: String,
    /// As acquired.
    principal: String,
    /// As acquired.
    key: String,
    /// Include the stored headers and body. Defaults to false.
    body: Option<bool>,
    /// Another namespace (admin clients only). Defaults to the caller's.
    namespace: Option<String>,
}

/// `GET /v1/records`.
#[utoipa::path(get, path = "/v1/records", tag = "keys", params(RecordsQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The live record", body = RecordView),
        (status = 400, description = "`invalid-request`", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`namespace-forbidden`: another namespace, not an admin client", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`record-not-found`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`store-unavailable`", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn records<St: IdempotencyStore>(
    State(s): State<Arc<KeyService<St>>>,
    caller: Caller,
    query: Result<Query<RecordsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<RecordView>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::invalid("query", e.body_text()))?;
    let namespace = match &q.namespace {
        Some(ns) if ns.as_str() != &*caller.namespace && !caller.admin => {
            return Err(ApiError::forbidden("reading another namespace"))
        }
        Some(ns) => ns.as_str(),
        None => &*caller.namespace,
    };
    if !crate::auth::valid_namespace(namespace) {
        return Err(ApiError::invalid(
            "namespace",
            "must be 1-64 of a-z 0-9 _ . -, starting with a letter or digit",
        ));
    }
    let key = validate::public_key(namespace, &q.scope, &q.principal, &q.key)?;
    let record = s
        .call(s.lifecycle.store().get(&key))
        .await?
        .ok_or_else(ApiError::not_found)?;
    let with_body = q.body.unwrap_or(false);
    // The body in clear, opened with the key service's keys (a record it cannot open is
    // shown without its headers and body).
    let opened = match with_body {
        true => s.lifecycle.open_response(record.clone()).ok().flatten(),
        false => None,
    };
    Ok(Json(RecordView {
        namespace: namespace.to_owned(),
        scope: q.scope,
        principal: q.principal,
        key: q.key,
        state: record.state.as_str().to_owned(),
        fence: record.fence,
        fingerprint_version: record.fingerprint.version,
        created_at: record.created_at,
        completed_at: record.completed_at,
        expires_at: record.expires_at,
        lease_expires_at: record.lease_expires_at,
        response: record.response.map(|r| {
            let clear = opened.as_ref();
            StoredView {
                status: r.status,
                body_bytes: clear.map_or(r.body.len(), |c| c.body.len()) as u64,
                replayable: r.replayable,
                headers: clear.map(|c| validate::response_parts(c).headers),
                body_base64: clear.map(|c| B64.encode(&c.body)),
            }
        }),
    }))
}
