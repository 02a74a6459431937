-- idemgate 0005: the id of the encryption key a sealed response was sealed with
-- (idemgate_core::seal), 16 hex digits; NULL for a response in clear.
--
-- Nullable without a default: a catalog change only. It is read only together with the
-- response checksum (written at the same fence), which covers it: a gateway built before
-- this migration reads a sealed record as corrupt and never replays its ciphertext, and a
-- key id it leaves behind after re-acquiring a record is ignored with the stale checksum.
-- Enable encryption only once every process runs a build with this migration.

ALTER TABLE {table} ADD COLUMN IF NOT EXISTS response_key_id TEXT;

COMMENT ON COLUMN {table}.response_key_id IS 'encryption key id of a sealed response';
