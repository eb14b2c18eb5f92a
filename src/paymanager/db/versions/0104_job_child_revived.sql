-- A flow's finished child brought back (retry, replay) is pending again for a parent that still
-- waits: job_child_finished (0100) counts its next finish too, so it is counted back in first.
-- Without it, a child cancelled or dead under the policy "ignore" and then retried was counted out
-- twice, and its parent ran before its siblings (tests/integration/jobs/test_flows_and_control.py).
-- Additive: a trigger, which processes running the previous release fire as well.
CREATE FUNCTION job_child_revived() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE job AS p SET pending_children = p.pending_children + 1
     WHERE p.id = NEW.parent_id AND p.state = 'waiting_children';
    RETURN NULL;
END
$$;
CREATE TRIGGER job_child_revived AFTER UPDATE OF state ON job
    FOR EACH ROW
    WHEN (NEW.parent_id IS NOT NULL
          AND OLD.state IN ('completed', 'dead', 'cancelled')
          AND NEW.state NOT IN ('completed', 'dead', 'cancelled'))
    EXECUTE FUNCTION job_child_revived();
