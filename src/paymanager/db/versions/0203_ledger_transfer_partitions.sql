-- Ledger transfers partitioned by month of their timestamp, so an old month can be detached and
-- archived (docs/OPERATIONS.md, "Archiving history") without a long lock; `history_partitions_ensure`
-- (migration 0302) creates the months ahead, run at start-up and by the storage upkeep.
--
-- What changes for the ledger:
-- - A partitioned table's unique indexes must include its partition key, so `id` is unique per
--   partition (an index of its own, made with each partition) and across partitions by the ledger
--   itself: a new transfer's timestamp is the current time, so it lands in the newest partition, and
--   ledger_batch_load reads every partition for its id (one index probe each) under the id's lock
--   before the batch writes it. `paymanager ledger verify` (ledger_verify_duplicate_ids) checks it.
-- - Ids of archived months are forgotten: repeating such an id creates it again. Archive only months
--   older than any retry (see OPERATIONS).
--
-- Indexes and the queries they serve (ledger.sql and the functions of migrations 0200-0202):
--   <partition>_id_key (id), unique per partition: every lookup by id (ledger_batch_load,
--       transfer_select_many);
--   ledger_transfer_timestamp_key (timestamp): unique, as TigerBeetle's timestamps are; a clash
--       between two processes' clocks is refused here (LedgerConflictError) and retried;
--   ledger_transfer_debit_idx / _credit_idx (account, timestamp): account_transfers_page and
--       _reversed (get_account_transfers), one range scan per side.

ALTER TABLE ledger_transfer RENAME TO ledger_transfer_unpartitioned;
ALTER INDEX ledger_transfer_pkey RENAME TO ledger_transfer_unpartitioned_pkey;
ALTER INDEX ledger_transfer_timestamp_key RENAME TO ledger_transfer_unpartitioned_timestamp_key;
ALTER INDEX ledger_transfer_debit_idx RENAME TO ledger_transfer_unpartitioned_debit_idx;
ALTER INDEX ledger_transfer_credit_idx RENAME TO ledger_transfer_unpartitioned_credit_idx;

CREATE TABLE ledger_transfer (
    id                uuid NOT NULL,
    debit_account_id  uuid NOT NULL,
    credit_account_id uuid NOT NULL,
    amount            bigint NOT NULL CHECK (amount >= 0),
    pending_id        uuid,
    user_data_128     uuid NOT NULL,
    user_data_64      bigint NOT NULL,
    user_data_32      bigint NOT NULL CHECK (user_data_32 BETWEEN 0 AND 4294967295),
    timeout           bigint NOT NULL CHECK (timeout BETWEEN 0 AND 4294967295),
    ledger            bigint NOT NULL CHECK (ledger BETWEEN 1 AND 4294967295),
    code              integer NOT NULL CHECK (code BETWEEN 1 AND 65535),
    flags             integer NOT NULL CHECK (flags BETWEEN 0 AND 65535),
    timestamp         bigint NOT NULL CHECK (timestamp > 0),
    CONSTRAINT ledger_transfer_accounts_different CHECK (debit_account_id <> credit_account_id),
    CONSTRAINT ledger_transfer_timeout_pending CHECK (timeout = 0 OR flags & 2 <> 0),
    CONSTRAINT ledger_transfer_pending_id_post_void CHECK ((pending_id IS NOT NULL) = (flags & 12 <> 0))
) PARTITION BY RANGE (timestamp);
CREATE UNIQUE INDEX ledger_transfer_timestamp_key ON ledger_transfer (timestamp);
CREATE INDEX ledger_transfer_debit_idx ON ledger_transfer (debit_account_id, timestamp);
CREATE INDEX ledger_transfer_credit_idx ON ledger_transfer (credit_account_id, timestamp);

-- The nanosecond timestamp at which a UTC month starts.
CREATE FUNCTION ledger_month_ns(month date) RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
    SELECT (extract(epoch FROM date_trunc('month', month)::timestamp) * 1000000000)::bigint
$$;

-- Creates the partition of the month of `month` unless it exists; true when it did. The partition is
-- made apart, with a CHECK of its range, then attached: ATTACH takes only a SHARE UPDATE EXCLUSIVE
-- lock on ledger_transfer (writers and readers go on) and, seeing the CHECK, scans nothing;
-- `CREATE TABLE ... PARTITION OF` would take an ACCESS EXCLUSIVE lock on the whole table.
CREATE FUNCTION ledger_transfer_partition_create(month date) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    name text := 'ledger_transfer_p' || to_char(month, 'YYYY_MM');
    lower_ns bigint := ledger_month_ns(month);
    upper_ns bigint := ledger_month_ns((date_trunc('month', month) + interval '1 month')::date);
BEGIN
    IF to_regclass(name) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE ledger_transfer INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', name);
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (timestamp >= %s AND timestamp < %s)',
                   name, name || '_range', lower_ns, upper_ns);
    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (id)', name || '_id_key', name);
    EXECUTE format('ALTER TABLE ledger_transfer ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)',
                   name, lower_ns, upper_ns);
    RETURN true;
END
$$;

-- Everything before this month in one partition (its own unique id index), then this month.
CREATE TABLE ledger_transfer_p_before (LIKE ledger_transfer INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
CREATE UNIQUE INDEX ledger_transfer_p_before_id_key ON ledger_transfer_p_before (id);
ALTER TABLE ledger_transfer ATTACH PARTITION ledger_transfer_p_before
    FOR VALUES FROM (MINVALUE) TO (ledger_month_ns((now() AT TIME ZONE 'UTC')::date));
SELECT ledger_transfer_partition_create((now() AT TIME ZONE 'UTC')::date);

INSERT INTO ledger_transfer SELECT * FROM ledger_transfer_unpartitioned;
DROP TABLE ledger_transfer_unpartitioned;
