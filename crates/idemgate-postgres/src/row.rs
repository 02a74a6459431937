//! Decoding rows of [`crate::sql::Statements::read`] into records.

use bytes::Bytes;
use idemgate_core::fingerprint::Fingerprint;
use idemgate_core::{
    IdempotencyRecord, LeaseToken, RecordState, ScopedKey, StoredResponse, UnixMillis,
};
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::error::PostgresStoreError;

fn corrupt(detail: impl Into<String>) -> PostgresStoreError {
    PostgresStoreError::Corrupt {
        detail: detail.into(),
    }
}

/// Decodes one row of the read statement: the record stored for `key` and the database
/// clock at the read (ms since the epoch).
///
/// # Errors
/// [`PostgresStoreError::Corrupt`] when a column does not decode or breaks an invariant
/// (unknown state, digest not 32 bytes, completed without status, broken header encoding).
pub(crate) fn record(
    key: &ScopedKey,
    row: &PgRow,
) -> Result<(IdempotencyRecord, UnixMillis), PostgresStoreError> {
    let digest: Vec<u8> = get(row, 0)?;
    let version: i32 = get(row, 1)?;
    let state: String = get(row, 2)?;
    let fingerprint = Fingerprint {
        version: u16::try_from(version)
            .map_err(|_| corrupt(format!("fingerprint_version {version} out of range")))?,
        digest: digest
            .as_slice()
            .try_into()
            .map_err(|_| corrupt(format!("request_hash is {} bytes, not 32", digest.len())))?,
    };
    let state =
        RecordState::parse(&state).ok_or_else(|| corrupt(format!("unknown state {state:?}")))?;
    let response = match state {
        RecordState::Completed => Some(response(row)?),
        _ => None,
    };
    let record = IdempotencyRecord {
        key: key.clone(),
        fingerprint,
        state,
        fence: get(row, 3)?,
        lease_token: get::<Option<i64>>(row, 4)?.map(LeaseToken),
        lease_expires_at: get(row, 5)?,
        created_at: get(row, 6)?,
        completed_at: get(row, 7)?,
        expires_at: get(row, 8)?,
        response,
    };
    Ok((record, get(row, 13)?))
}

fn response(row: &PgRow) -> Result<StoredResponse, PostgresStoreError> {
    let status: Option<i32> = get(row, 9)?;
    let status = status.ok_or_else(|| corrupt("completed record without status"))?;
    let headers: Option<Vec<u8>> = get(row, 10)?;
    let headers = StoredResponse::decode_headers(headers.as_deref().unwrap_or_default())
        .map_err(|e| corrupt(format!("response_headers: {e}")))?;
    let body: Option<Vec<u8>> = get(row, 11)?;
    let replayable: Option<bool> = get(row, 12)?;
    Ok(StoredResponse {
        status: u16::try_from(status)
            .map_err(|_| corrupt(format!("status {status} out of range")))?,
        headers,
        body: body.map(Bytes::from).unwrap_or_default(),
        replayable: replayable.ok_or_else(|| corrupt("completed record without replayable"))?,
    })
}

fn get<'r, T>(row: &'r PgRow, index: usize) -> Result<T, PostgresStoreError>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    // A column that does not decode is classified as StoreError::Corrupt (error.rs).
    Ok(row.try_get(index)?)
}
