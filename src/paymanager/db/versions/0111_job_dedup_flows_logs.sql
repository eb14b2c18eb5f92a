-- Deduplication keys with a time to live, per-child flow policies (and "continue"), per-job logs.
-- docs/state_machines.md ("Deduplication", "Flows", "Logs") gives the semantics. Additive: the
-- statements of the previous release neither read nor write what is added here.

-- Deduplication (throttle and debounce): a caller's key held for a time, whatever its job's state,
-- apart from the job table so that a queue that does not deduplicate pays nothing (no index on the
-- job table, no trigger). `job_id` has no foreign key: deleting (pruning) a job then checks
-- nothing here, and a key whose job is gone is simply a key whose job is finished.
CREATE TABLE job_dedup (
    key         text PRIMARY KEY CHECK (length(key) BETWEEN 1 AND 512),
    job_id      bigint,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX job_dedup_expires_idx ON job_dedup (expires_at);

-- Failure policies: "continue" makes the parent available as soon as a child is dead or cancelled
-- (its other children run on); a child may carry its own policy (parent_policy), which wins over
-- its parent's on_child_dead.
ALTER DOMAIN job_child_policy DROP CONSTRAINT job_child_policy_known;
ALTER DOMAIN job_child_policy ADD CONSTRAINT job_child_policy_known
    CHECK (VALUE IN ('fail', 'ignore', 'continue'));
ALTER TABLE job
    ADD COLUMN parent_policy job_child_policy,
    -- ctx.log lines: a bounded JSON array of {"at", "line"} kept with the job (JobContext.log).
    ADD COLUMN logs jsonb;

CREATE OR REPLACE FUNCTION job_child_finished() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    failed boolean := NEW.state IN ('dead', 'cancelled');
    policy text;
BEGIN
    SELECT coalesce(NEW.parent_policy, p.on_child_dead) INTO policy FROM job AS p WHERE p.id = NEW.parent_id;
    UPDATE job AS p
       SET pending_children = greatest(p.pending_children - 1, 0),
           state = CASE
               WHEN failed AND policy = 'fail' THEN 'dead'::job_state
               WHEN failed AND policy = 'continue' THEN 'available'::job_state
               WHEN p.pending_children - 1 <= 0 THEN 'available'::job_state
               ELSE p.state END,
           run_at = now(),
           finalized_at = CASE WHEN failed AND policy = 'fail' THEN now() END,
           last_error = CASE WHEN failed AND policy = 'fail'
               THEN jsonb_build_object('error', 'child job ' || NEW.id || ' is ' || NEW.state,
                                       'type', 'ChildFailed', 'at', now())
               ELSE p.last_error END
     WHERE p.id = NEW.parent_id AND p.state = 'waiting_children';
    IF FOUND THEN
        PERFORM pg_notify('pm_job_available', queue) FROM job WHERE id = NEW.parent_id AND state = 'available';
    END IF;
    RETURN NULL;
END
$$;
