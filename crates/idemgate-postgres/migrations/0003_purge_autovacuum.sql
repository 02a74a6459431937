-- idemgate 0003: let vacuum keep pace with the purge, and make the stuck gauge cheap.
--
-- The purge deletes expired rows continuously; each delete leaves a dead row version that
-- only vacuum reclaims. With the defaults (autovacuum_vacuum_scale_factor = 0.2) autovacuum
-- waits until a fifth of the table is dead: on a 100 GB table that is 20 GB of bloat before
-- the first pass, and a pass over a bloated table runs long enough for the next 20% to pile
-- up (the design article's incident: the table grew to 200 GB and latency doubled). These
-- per-table settings start vacuum once 1% of the rows (plus 1000) are dead, analyze at 2%,
-- and let it work with a short cost delay, so space is reused by new inserts instead of
-- growing the file. They are storage parameters: `ALTER TABLE ... RESET (...)` or another
-- SET overrides them, and they take effect at once, without a rewrite.
--
-- The partial index holds only in_progress rows (requests in flight and records whose
-- holder died), a few per concurrent request, so counting in_progress and stuck records
-- every metrics interval reads a small index instead of the table. It indexes created_at,
-- which a renewal never changes, so renewals can stay HOT updates. CREATE INDEX inside the
-- migration's transaction blocks writes while it builds; on a large table, run first
--   CREATE INDEX CONCURRENTLY <name>_in_progress_idx ON <table> (created_at)
--     WHERE state = 'in_progress';
-- and this migration then finds it (IF NOT EXISTS).

ALTER TABLE {table} SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_analyze_threshold = 1000,
    autovacuum_vacuum_cost_delay = 1
);

CREATE INDEX IF NOT EXISTS {name}_in_progress_idx ON {table} (created_at)
    WHERE state = 'in_progress';
