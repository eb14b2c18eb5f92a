-- The storage upkeep's duties (application/storage/upkeep.py): when each last ran, so a duty runs once
-- per interval over the whole cluster whichever process gets to it (every process runs the upkeep).
CREATE TABLE storage_upkeep (
    duty         text PRIMARY KEY CHECK (duty IN ('history-partitions', 'churn-vacuum')),
    last_run_at  timestamptz NOT NULL
);

-- Drops the foreign keys a table detached from intent, settlement or ledger_transfer still holds
-- (detaching keeps them as constraints of its own), so the partition of the table they refer to can be
-- detached in turn and the tables archived apart (application/storage/archive.py). Refuses a table
-- that is still a partition.
CREATE FUNCTION history_partition_release(detached regclass) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    fk record;
    dropped integer := 0;
BEGIN
    IF EXISTS (SELECT FROM pg_inherits WHERE inhrelid = detached) THEN
        RAISE EXCEPTION '% is still a partition: detach it first', detached;
    END IF;
    FOR fk IN SELECT conname FROM pg_constraint
               WHERE conrelid = detached AND contype = 'f' AND conparentid = 0 LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT IF EXISTS %I', detached, fk.conname);
        dropped := dropped + 1;
    END LOOP;
    RETURN dropped;
END
$$;
