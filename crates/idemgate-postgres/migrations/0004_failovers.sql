-- idemgate 0004: the first detection of each failover, for the forward journal.
--
-- A gateway or key service with forward_journal_file refuses new keys after a failover until
-- failover_grace has passed since the FIRST process noticed it, so a process that notices
-- late (or starts during the grace) does not accept retries of keys another process has not
-- restored yet. The first detection is recorded here by the database clock (INSERT ... ON
-- CONFLICT DO NOTHING), keyed by the database's system identifier (0 where it cannot be
-- read) and the new primary's timeline: a database restored from a dump or moved by logical
-- replication starts its timelines at 1 again under another system identifier, so rows it
-- carried over never stand for its own failovers. Nothing else reads or writes this table.

CREATE TABLE IF NOT EXISTS {failovers} (
    system_identifier BIGINT      NOT NULL,
    timeline          BIGINT      NOT NULL,
    first_seen_at     TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (system_identifier, timeline)
);

COMMENT ON TABLE {failovers} IS 'idemgate: first detection of each primary timeline (forward journal)';
