-- idemgate records (DESIGN.md "State machine", "Leases and fences", "TTL and cleanup").
-- Times are ms since the Unix epoch; a record counts as absent once expires_at <= now.
CREATE TABLE idempotency_records (
    principal           TEXT    NOT NULL,
    route               TEXT    NOT NULL,
    key                 TEXT    NOT NULL,
    fingerprint         BLOB    NOT NULL,      -- SHA-256, 32 bytes
    fingerprint_version INTEGER NOT NULL,
    state               TEXT    NOT NULL CHECK (state IN ('in_progress', 'completed', 'failed')),
    fence               INTEGER NOT NULL,      -- grows on every takeover
    lease_token         INTEGER,               -- while in_progress
    lease_expires_at    INTEGER,               -- while in_progress
    status              INTEGER,               -- once completed
    response_headers    BLOB,                  -- StoredResponse::encode_headers
    response_body       BLOB,
    replayable          INTEGER,
    created_at          INTEGER NOT NULL,
    completed_at        INTEGER,
    expires_at          INTEGER NOT NULL,
    PRIMARY KEY (principal, route, key)
);

-- Purging scans by expiry whatever the state, so abandoned in_progress and failed rows go too.
CREATE INDEX idempotency_records_expires_at ON idempotency_records (expires_at);
