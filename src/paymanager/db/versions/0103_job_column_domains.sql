-- The job table's one-column CHECK constraints move to domains, as the queue and kind names did in 0101.
--
-- At the start of every INSERT and UPDATE statement PostgreSQL reads each CHECK constraint of the
-- table back from its stored text and plans it again, whatever the statement sets. With thirteen
-- of them that was 0.02-0.03 ms of a one-row INSERT and 0.07-0.08 ms of a one-row UPDATE such as a
-- claim (docs/BENCHMARKS.md, "Enqueue-to-start latency"), both on the way from an enqueue to its
-- handler. A
-- domain's constraint is parsed once per backend (its type cache) and checked where a value is
-- assigned to the column: an INSERT, or an UPDATE that sets that column. Ten move, their rules
-- unchanged; the three CHECKs that relate two columns stay on the table.
--
-- As in 0101: the columns change first to unconstrained domains over their own types (binary
-- compatible: no rewrite, the indexes are kept), the domains then get their constraints (checked
-- against the rows present), and the table's constraints go last.
CREATE DOMAIN job_priority AS integer;
CREATE DOMAIN job_counter AS integer;
CREATE DOMAIN job_max_attempts AS integer;
CREATE DOMAIN job_timeout_ms AS integer;
CREATE DOMAIN job_unique_key AS text;
CREATE DOMAIN job_child_policy AS text;
CREATE DOMAIN job_progress AS real;
CREATE DOMAIN job_payload AS jsonb;

ALTER TABLE job
    ALTER COLUMN priority TYPE job_priority,
    ALTER COLUMN attempt TYPE job_counter,
    ALTER COLUMN pending_children TYPE job_counter,
    ALTER COLUMN stalled_count TYPE job_counter,
    ALTER COLUMN max_attempts TYPE job_max_attempts,
    ALTER COLUMN timeout_ms TYPE job_timeout_ms,
    ALTER COLUMN unique_key TYPE job_unique_key,
    ALTER COLUMN on_child_dead TYPE job_child_policy,
    ALTER COLUMN progress TYPE job_progress,
    ALTER COLUMN payload TYPE job_payload;

-- Lower runs first (as in River and BullMQ).
ALTER DOMAIN job_priority ADD CONSTRAINT job_priority_range CHECK (VALUE BETWEEN -1000 AND 1000);
-- attempt, pending_children, stalled_count.
ALTER DOMAIN job_counter ADD CONSTRAINT job_counter_not_negative CHECK (VALUE >= 0);
ALTER DOMAIN job_max_attempts ADD CONSTRAINT job_max_attempts_range CHECK (VALUE BETWEEN 1 AND 1000);
ALTER DOMAIN job_timeout_ms ADD CONSTRAINT job_timeout_ms_range CHECK (VALUE BETWEEN 1 AND 86400000);
ALTER DOMAIN job_unique_key ADD CONSTRAINT job_unique_key_length CHECK (length(VALUE) BETWEEN 1 AND 512);
ALTER DOMAIN job_child_policy ADD CONSTRAINT job_child_policy_known CHECK (VALUE IN ('fail', 'ignore'));
ALTER DOMAIN job_progress ADD CONSTRAINT job_progress_range CHECK (VALUE BETWEEN 0 AND 100);
ALTER DOMAIN job_payload ADD CONSTRAINT job_payload_size CHECK (pg_column_size(VALUE) <= 16777216);

ALTER TABLE job
    DROP CONSTRAINT job_priority_check,
    DROP CONSTRAINT job_attempt_check,
    DROP CONSTRAINT job_pending_children_check,
    DROP CONSTRAINT job_stalled_count_check,
    DROP CONSTRAINT job_max_attempts_check,
    DROP CONSTRAINT job_timeout_ms_check,
    DROP CONSTRAINT job_unique_key_check,
    DROP CONSTRAINT job_on_child_dead_check,
    DROP CONSTRAINT job_progress_check,
    DROP CONSTRAINT job_payload_size;
