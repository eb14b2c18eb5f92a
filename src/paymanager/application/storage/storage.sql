-- name: storage_partitions_ensure
-- The history partitions (ledger_transfer, intent, settlement) of the month of $1 and of the $2
-- months after it, those missing created (migration 0302); how many months gained one.
SELECT history_partitions_ensure($1, $2);

-- name: storage_lock_timeout_set
-- For the rest of the transaction: a partition's attach waits at most $1 for its locks (see
-- intent_partition_create), then fails and is tried again at the next run.
SELECT set_config('lock_timeout', $1, true);

-- name: storage_tables_without_autovacuum
-- Those of tables $1 that autovacuum does not look after: every one when the server's autovacuum is
-- off, else those whose own autovacuum_enabled is false.
SELECT c.relname AS name
  FROM pg_class AS c
  JOIN pg_namespace AS n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND c.relname = ANY ($1::text[]) AND c.relkind IN ('r', 'p')
   AND (NOT current_setting('autovacuum')::boolean
        OR coalesce(c.reloptions @> ARRAY['autovacuum_enabled=false'], false))
 ORDER BY c.relname;

-- name: storage_duty_claim
-- Claims duty $1's run at $2 unless it ran less than $3 milliseconds before: true when it is ours.
INSERT INTO storage_upkeep AS u (duty, last_run_at) VALUES ($1, $2)
ON CONFLICT (duty) DO UPDATE SET last_run_at = EXCLUDED.last_run_at
 WHERE u.last_run_at <= EXCLUDED.last_run_at - make_interval(secs => $3::double precision / 1000)
RETURNING true;

-- name: storage_partitions_attached
-- Those of tables $1 that are partitions now.
SELECT c.relname AS name
  FROM pg_class AS c JOIN pg_inherits AS i ON i.inhrelid = c.oid
 WHERE c.relname = ANY ($1::text[]) AND c.relnamespace = current_schema()::regnamespace;

-- name: storage_tables_existing
-- Those of tables $1 that exist.
SELECT relname AS name FROM pg_class
 WHERE relname = ANY ($1::text[]) AND relkind = 'r' AND relnamespace = current_schema()::regnamespace;

-- name: storage_partition_release
-- Drops the foreign keys of detached table $1 (migration 0303).
SELECT history_partition_release($1::regclass);

-- name: storage_ledger_archive
-- Records the sums of detached ledger table $1 and forgets its pending states (migration 0204).
SELECT ledger_transfer_archive($1::regclass);

-- name: storage_ledger_archived
SELECT EXISTS (SELECT FROM ledger_transfer_archive_log WHERE table_name = $1);
