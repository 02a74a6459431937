-- idemgate 0001: the idempotency records table (DESIGN.md, "PostgreSQL schema").
--
-- The design article's columns keep their meaning: user_id (the principal, TEXT here),
-- route, key, request_hash (the fingerprint digest), status, response, state, created_at,
-- completed_at, primary key (user_id, route, key). `response` holds the raw body bytes
-- (BYTEA: bodies need not be JSON). Added: response headers, replayable, the fingerprint
-- version, the lease (token, expiry), the fence and the TTL (expires_at).
--
-- The migration runner replaces {table} with the quoted, optionally schema-qualified table
-- name and {name} with the bare table name (for constraint and index names).

CREATE TABLE {table} (
    user_id             TEXT        NOT NULL,
    route               TEXT        NOT NULL,
    key                 TEXT        NOT NULL,
    request_hash        BYTEA       NOT NULL,
    fingerprint_version INTEGER     NOT NULL,
    state               TEXT        NOT NULL,
    status              INTEGER,
    response_headers    BYTEA,
    response            BYTEA,
    replayable          BOOLEAN,
    lease_token         BIGINT,
    lease_expires_at    TIMESTAMPTZ,
    fence               BIGINT      NOT NULL,
    created_at          TIMESTAMPTZ NOT NULL,
    completed_at        TIMESTAMPTZ,
    expires_at          TIMESTAMPTZ NOT NULL,
    CONSTRAINT {name}_pkey PRIMARY KEY (user_id, route, key),
    CONSTRAINT {name}_state_check CHECK (state IN ('in_progress', 'completed', 'failed')),
    CONSTRAINT {name}_completed_status_check CHECK (state <> 'completed' OR status IS NOT NULL)
);

-- Cleanup index over every state: abandoned in_progress and failed rows expire too.
CREATE INDEX {name}_expires_at_idx ON {table} (expires_at);

COMMENT ON TABLE {table} IS 'idemgate idempotency records, one per (principal, route, key)';
COMMENT ON COLUMN {table}.user_id IS 'principal: the authenticated caller';
COMMENT ON COLUMN {table}.route IS 'matched route template, e.g. POST /payments';
COMMENT ON COLUMN {table}.key IS 'the client''s Idempotency-Key';
COMMENT ON COLUMN {table}.request_hash IS 'request fingerprint digest (SHA-256)';
COMMENT ON COLUMN {table}.fingerprint_version IS 'fingerprint algorithm version of request_hash';
COMMENT ON COLUMN {table}.state IS 'in_progress | completed | failed';
COMMENT ON COLUMN {table}.status IS 'stored HTTP status, once completed';
COMMENT ON COLUMN {table}.response_headers IS 'stored response headers (idemgate header encoding)';
COMMENT ON COLUMN {table}.response IS 'stored response body, raw bytes';
COMMENT ON COLUMN {table}.replayable IS 'false when the body was not kept (streamed or too large)';
COMMENT ON COLUMN {table}.lease_token IS 'random token of the lease holder while in_progress';
COMMENT ON COLUMN {table}.lease_expires_at IS 'when the holder''s lease lapses unless renewed';
COMMENT ON COLUMN {table}.fence IS 'grows by one on every takeover';
COMMENT ON COLUMN {table}.expires_at IS 'TTL: the record counts as absent from then on and is purged';
