-- The response checksum (idemgate_core::integrity::response_checksum): 32 bytes written with
-- every completed response and verified on every read. NULL on rows written before it
-- existed; those are checked by the other rules only, so a gateway built before this
-- migration can keep sharing the file.
ALTER TABLE idempotency_records ADD COLUMN response_checksum BLOB;

-- A gateway built before this migration does not know the column: when it re-acquires a
-- row (rewriting its state to in_progress) it would leave the old checksum behind, and the
-- response it completes later would fail that stale checksum. Clear it whenever a row goes
-- back to in_progress with a checksum still set (this build clears it itself).
CREATE TRIGGER idempotency_records_clear_stale_checksum
AFTER UPDATE OF state ON idempotency_records
WHEN NEW.state = 'in_progress' AND NEW.response_checksum IS NOT NULL
BEGIN
    UPDATE idempotency_records SET response_checksum = NULL WHERE rowid = NEW.rowid;
END;
