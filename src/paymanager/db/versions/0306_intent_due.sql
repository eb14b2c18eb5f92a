-- An intent's status changes become HOT updates (no new index entries), so a settled intent keeps one
-- entry per index instead of one per version it went through (bench/footprint.py; docs/BENCHMARKS.md,
-- "Storage").
--
-- A row update is HOT only when no column that an index keys on or names in its predicate changes.
-- The three partial indexes that found intents waiting for a deadline named `status` in their
-- predicates and keyed on the deadline, both set by the confirm and the status by every end. They are
-- replaced by `intent_due`: a row per intent that waits for a deadline, kept by a trigger in the
-- transaction of the status change, deleted as the intent leaves that status, so the table holds only
-- the intents in flight. The indexes left on intent key on columns that never change (id, service,
-- payer, payee, created_at). The pages keep no reserved space (a fillfactor of 90 measured larger:
-- the heap grew by more than the indexes shrank); a new version lands on its page when the page's
-- dead versions, pruned as it fills, left room.
--
-- Queries (application/intents/intents.sql):
--   intent_due_pkey (intent_id): the trigger's delete as the intent leaves its status;
--   intent_due_idx (status, due_at, intent_id): intent_confirmed_batch (the reconciler: confirmed,
--       oldest deadline first, after a cursor), intent_capture_due (uncaptured past their capture
--       deadline), intent_expire_due (created invoices past their expiry).
-- Dropped: intent_confirmed_idx, intent_capture_due_idx, intent_invoice_due_idx (those three queries).
CREATE TABLE intent_due (
    intent_id  uuid PRIMARY KEY,
    due_at     timestamptz NOT NULL,
    status     text NOT NULL CHECK (status IN ('created', 'confirmed', 'requires_capture'))
);
CREATE INDEX intent_due_idx ON intent_due (status, due_at, intent_id);
-- Rows come and go with every intent: vacuumed early so the space is reused.
ALTER TABLE intent_due SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.1);

-- The deadline an intent in `status` waits for: a created invoice its expiry, a confirmed intent its
-- settlement deadline, an uncaptured one its capture deadline; NULL when it waits for none.
CREATE FUNCTION intent_due_at(status text, expires_at timestamptz, settle_deadline_at timestamptz)
RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE status WHEN 'created' THEN expires_at
                       WHEN 'confirmed' THEN settle_deadline_at
                       WHEN 'requires_capture' THEN settle_deadline_at END
$$;

CREATE FUNCTION intent_due_track() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    due timestamptz := intent_due_at(NEW.status, NEW.expires_at, NEW.settle_deadline_at);
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF NEW.status = OLD.status AND NEW.expires_at IS NOT DISTINCT FROM OLD.expires_at
           AND NEW.settle_deadline_at IS NOT DISTINCT FROM OLD.settle_deadline_at THEN
            RETURN NULL;
        END IF;
        IF intent_due_at(OLD.status, OLD.expires_at, OLD.settle_deadline_at) IS NOT NULL THEN
            DELETE FROM intent_due WHERE intent_id = OLD.id;
        END IF;
    END IF;
    IF due IS NOT NULL THEN
        INSERT INTO intent_due (intent_id, due_at, status) VALUES (NEW.id, due, NEW.status);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER intent_due_track AFTER INSERT OR UPDATE OF status, expires_at, settle_deadline_at ON intent
    FOR EACH ROW EXECUTE FUNCTION intent_due_track();

-- The intents waiting now, under a lock that keeps their statuses still while they are copied.
LOCK TABLE intent IN SHARE MODE;
INSERT INTO intent_due (intent_id, due_at, status)
SELECT id, intent_due_at(status, expires_at, settle_deadline_at), status
  FROM intent
 WHERE intent_due_at(status, expires_at, settle_deadline_at) IS NOT NULL;

DROP INDEX intent_confirmed_idx, intent_invoice_due_idx;
-- Made by migration 0350, which a database created now runs after this one (docs/BENCHMARKS.md,
-- "Storage", says what that costs); one that ran 0350 first loses it here.
DROP INDEX IF EXISTS intent_capture_due_idx;
