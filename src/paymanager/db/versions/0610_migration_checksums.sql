-- The SHA-256 of each applied migration file, so a file changed after it ran is refused at start
-- (db/migrations.py). NULL until the runner records it: rows of databases migrated before this
-- column existed are filled in by the first `paymanager migrate` that knows about it.
ALTER TABLE schema_migrations ADD COLUMN checksum text
    CHECK (checksum IS NULL OR checksum ~ '^[0-9a-f]{64}$');
