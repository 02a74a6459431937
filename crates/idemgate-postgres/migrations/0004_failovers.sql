-- idemgate 0004: the first detection of each failover, for the forward journal.
--
-- A gateway or key service with forward_journal_file refuses new keys after a failover until
-- failover_grace has passed since the FIRST process noticed it, so a process that notices
-- late does not accept retries of keys another process has not restored yet. The first
-- detection is recorded here by the database clock (INSERT ... ON CONFLICT DO NOTHING on
-- the new primary's timeline). One row per failover; nothing else reads or writes it.

CREATE TABLE IF NOT EXISTS {failovers} (
    timeline      BIGINT      PRIMARY KEY,
    first_seen_at TIMESTAMPTZ NOT NULL
);

COMMENT ON TABLE {failovers} IS 'idemgate: first detection of each primary timeline (forward journal)';
