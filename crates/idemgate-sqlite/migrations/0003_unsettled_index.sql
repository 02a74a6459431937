-- The store gauges (crate::gauges) at any table size. They used to scan the whole table,
-- grouped by state, at every metrics interval: at 10 million records that scan and its sort
-- took 40 % of the gateway's CPU. This partial index holds the records not settled
-- (in_progress and failed: few beside the completed ones), so those, and the stuck
-- in_progress records among them, are counted exactly without reading the others.
-- An index is transparent to a build that predates it: SQLite keeps it up to date on that
-- build's writes too. Building it reads the table once, inside the migration.
CREATE INDEX idempotency_records_unsettled ON idempotency_records (state, expires_at)
    WHERE state <> 'completed';
