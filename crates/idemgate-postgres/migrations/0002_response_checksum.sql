-- idemgate 0002: the stored response's checksum (idemgate_core::integrity::response_checksum).
--
-- Both columns are nullable and have no default, so adding them is a catalog change only
-- (no table rewrite), and a gateway built before this migration keeps working on the table:
-- its statements name their columns, leave these NULL, and its records are validated
-- without a checksum.
--
-- response_checksum_fence is the fence the checksum was written at. A checksum counts only
-- while the record still has that fence: an older gateway that replaces or takes over a
-- record (fence + 1) and completes it does not know about the checksum and leaves the old
-- one behind, which must then be ignored rather than read as damage.

ALTER TABLE {table}
    ADD COLUMN IF NOT EXISTS response_checksum BYTEA,
    ADD COLUMN IF NOT EXISTS response_checksum_fence BIGINT;

COMMENT ON COLUMN {table}.response_checksum IS 'SHA-256 of the scope and stored response';
COMMENT ON COLUMN {table}.response_checksum_fence IS 'fence response_checksum was written at';
