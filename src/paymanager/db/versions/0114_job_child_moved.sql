-- One trigger for a flow child's moves, whose WHEN clause reads the parent link alone. PostgreSQL
-- compiles a row trigger's WHEN clause again for every UPDATE statement of the table (and each
-- CHECK constraint likewise), whether or not a row needs it: the state tests of the two triggers of
-- 0100 and 0104 were a quarter of what a one-row UPDATE of `job` cost (a claim or a completion of one
-- job), parent or not (docs/BENCHMARKS.md, "Flow triggers"). The tests now run in the function, for
-- the updates of flow children only. The effects are those two triggers' (0111's
-- job_child_finished, 0104's job_child_revived): a child that reaches a terminal state is counted
-- out of its waiting parent, which runs, fails or goes on by the child's policy; a finished child
-- brought back (retry, replay) is counted in again.
CREATE FUNCTION job_child_moved() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    was_final boolean := OLD.state IN ('completed', 'dead', 'cancelled');
    is_final boolean := NEW.state IN ('completed', 'dead', 'cancelled');
    failed boolean := NEW.state IN ('dead', 'cancelled');
    policy text;
BEGIN
    IF is_final AND NOT was_final THEN
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
    ELSIF was_final AND NOT is_final THEN
        UPDATE job AS p SET pending_children = p.pending_children + 1
         WHERE p.id = NEW.parent_id AND p.state = 'waiting_children';
    END IF;
    RETURN NULL;
END
$$;
DROP TRIGGER job_child_finished ON job;
DROP TRIGGER job_child_revived ON job;
DROP FUNCTION job_child_finished();
DROP FUNCTION job_child_revived();
CREATE TRIGGER job_child_moved AFTER UPDATE OF state ON job
    FOR EACH ROW
    WHEN (NEW.parent_id IS NOT NULL)
    EXECUTE FUNCTION job_child_moved();
