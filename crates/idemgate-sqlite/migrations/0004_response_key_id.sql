-- The id of the encryption key a sealed response was sealed with (idemgate_core::seal):
-- 16 hex digits, NULL for a response stored in clear. The response checksum covers it, so a
-- build that predates this column reads a sealed record as corrupt and never replays it
-- (enable encryption only once every process runs a build with this migration).
ALTER TABLE idempotency_records ADD COLUMN response_key_id TEXT;

-- An older build re-acquiring a row rewrites its state but not this column: clear it
-- whenever a row goes back to in_progress with it still set (this build clears it itself),
-- as the checksum's trigger does.
CREATE TRIGGER idempotency_records_clear_stale_key_id
AFTER UPDATE OF state ON idempotency_records
WHEN NEW.state = 'in_progress' AND NEW.response_key_id IS NOT NULL
BEGIN
    UPDATE idempotency_records SET response_key_id = NULL WHERE rowid = NEW.rowid;
END;
