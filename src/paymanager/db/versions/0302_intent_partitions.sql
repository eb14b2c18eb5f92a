-- Intents and settlements partitioned by month, so an old month can be detached and archived
-- (docs/OPERATIONS.md, "Archiving history") without a long lock. Intent ids are UUIDv7
-- (application/ids.py: 48 bits of milliseconds first), so a month is a range of ids: the partition
-- key is the primary key itself, `intent.id` stays unique and foreign keys to intent(id) keep working.
-- A settlement shares its intent's id and so its month.
--
-- Indexes and the queries they serve (application/intents/intents.sql):
--   intent_pkey (id): every lookup and lock by id, intent_list/intent_history's keyset cursor;
--   intent_service_idx (service_id, id DESC): intent_list of one service, newest first;
--   intent_payer_idx (payer_account_id, created_at): intent_daily_volume, and the payer arm of
--       intent_history and of intent_list's account filter;
--   intent_payee_idx (payee_account_id): the payee arm of those two (they order by id, so the
--       created_at it carried served nothing);
--   intent_confirmed_idx (settle_deadline_at) WHERE confirmed: intent_confirmed_batch (the reconciler);
--   intent_invoice_due_idx (expires_at) WHERE created invoice: intent_expire_due (the invoice sweep);
--   settlement_pkey (intent_id): the once-only insert of the settlement row.
-- Dropped: the unique index on hold_id, which no query reads (a hold id is a fresh UUIDv7 per confirm,
-- and a unique index without the partition key cannot exist on a partitioned table).

-- The smallest UUIDv7 of the UTC month of `month`: its bound as a partition of ids.
CREATE FUNCTION uuid_v7_month_floor(month date) RETURNS uuid LANGUAGE sql IMMUTABLE AS $$
    SELECT (lpad(to_hex((extract(epoch FROM date_trunc('month', month)::timestamp) * 1000)::bigint), 12, '0')
            || '00000000000000000000')::uuid
$$;

ALTER TABLE settlement RENAME TO settlement_unpartitioned;
ALTER INDEX settlement_pkey RENAME TO settlement_unpartitioned_pkey;
ALTER TABLE intent RENAME TO intent_unpartitioned;
ALTER INDEX intent_pkey RENAME TO intent_unpartitioned_pkey;
DROP INDEX intent_service_idx, intent_payer_idx, intent_payee_idx, intent_confirmed_idx, intent_invoice_due_idx;
ALTER TABLE intent_unpartitioned DROP CONSTRAINT intent_hold_id_key;

CREATE TABLE intent (
    id                  uuid NOT NULL,
    service_id          text NOT NULL REFERENCES service (id),
    channel             text NOT NULL CHECK (channel IN ('internal-p2p', 'ipps-transfer',
                            'service-transfer', 'admin-transfer', 'merchant-invoice')),
    status              text NOT NULL DEFAULT 'created' CHECK (status IN ('created', 'confirmed',
                            'settled', 'failed', 'cancelled', 'expired')),
    amount              bigint NOT NULL CHECK (amount > 0 AND amount <= 1000000000000000),
    fee                 bigint NOT NULL CHECK (fee >= 0 AND fee <= 1000000000000000),
    currency            text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    payer_account_id    uuid NOT NULL REFERENCES account (id),
    payee_account_id    uuid NOT NULL REFERENCES account (id),
    fee_account_id      uuid REFERENCES account (id),
    description         text CHECK (description IS NULL OR length(description) <= 500),
    metadata            jsonb NOT NULL DEFAULT '{}' CHECK (length(metadata::text) <= 8192),
    version             integer NOT NULL DEFAULT 1 CHECK (version >= 1),
    failure_reason      text CHECK (failure_reason IS NULL OR length(failure_reason) <= 500),
    hold_id             uuid,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    expires_at          timestamptz,
    confirmed_at        timestamptz,
    settle_deadline_at  timestamptz,
    finished_at         timestamptz,
    PRIMARY KEY (id),
    CHECK (payer_account_id <> payee_account_id),
    CHECK ((fee > 0) = (fee_account_id IS NOT NULL)),
    CHECK ((status IN ('settled', 'failed', 'cancelled', 'expired')) = (finished_at IS NOT NULL)),
    CHECK (status <> 'expired' OR channel = 'merchant-invoice'),
    CHECK ((channel = 'merchant-invoice') = (expires_at IS NOT NULL)),
    CHECK (status NOT IN ('confirmed', 'settled', 'failed')
           OR (confirmed_at IS NOT NULL AND settle_deadline_at IS NOT NULL AND hold_id IS NOT NULL))
) PARTITION BY RANGE (id);
CREATE INDEX intent_service_idx ON intent (service_id, id DESC);
CREATE INDEX intent_payer_idx ON intent (payer_account_id, created_at);
CREATE INDEX intent_payee_idx ON intent (payee_account_id);
CREATE INDEX intent_confirmed_idx ON intent (settle_deadline_at) WHERE status = 'confirmed';
CREATE INDEX intent_invoice_due_idx ON intent (expires_at) WHERE status = 'created' AND expires_at IS NOT NULL;
CREATE TRIGGER intent_transition BEFORE UPDATE OF status ON intent
    FOR EACH ROW EXECUTE FUNCTION intent_check_transition();

CREATE TABLE settlement (
    intent_id   uuid NOT NULL REFERENCES intent (id),
    outcome     text NOT NULL CHECK (outcome IN ('posted', 'voided')),
    status      text NOT NULL CHECK (status IN ('settled', 'failed', 'cancelled')),
    amount      bigint NOT NULL CHECK (amount > 0),
    fee         bigint NOT NULL CHECK (fee >= 0),
    currency    text NOT NULL,
    settled_by  text NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (intent_id),
    CHECK ((outcome = 'posted') = (status = 'settled'))
) PARTITION BY RANGE (intent_id);

-- Creates the partitions of intent and settlement for the month of `month` unless they exist; true
-- when it did. Made apart with a CHECK of their range and attached (SHARE UPDATE EXCLUSIVE on the
-- parent, no scan), as ledger_transfer_partition_create explains. Attaching clones the foreign keys,
-- which locks the referenced tables (account, service; intent for a settlement partition) against
-- writes for the moment it takes on an empty table; callers set a lock_timeout and try again later.
CREATE FUNCTION intent_partition_create(month date) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    suffix text := 'p' || to_char(month, 'YYYY_MM');
    lower_id uuid := uuid_v7_month_floor(month);
    upper_id uuid := uuid_v7_month_floor((date_trunc('month', month) + interval '1 month')::date);
    created boolean := false;
    parent text;
    key text;
BEGIN
    FOREACH parent IN ARRAY ARRAY['intent', 'settlement'] LOOP
        key := CASE parent WHEN 'intent' THEN 'id' ELSE 'intent_id' END;
        CONTINUE WHEN to_regclass(parent || '_' || suffix) IS NOT NULL;
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                       parent || '_' || suffix, parent);
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (%I >= %L AND %I < %L)',
                       parent || '_' || suffix, parent || '_' || suffix || '_range', key, lower_id, key, upper_id);
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                       parent, parent || '_' || suffix, lower_id, upper_id);
        created := true;
    END LOOP;
    RETURN created;
END
$$;

-- Everything before this month in one partition each, then this month.
CREATE TABLE intent_p_before (LIKE intent INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE intent ATTACH PARTITION intent_p_before
    FOR VALUES FROM (MINVALUE) TO (uuid_v7_month_floor((now() AT TIME ZONE 'UTC')::date));
CREATE TABLE settlement_p_before (LIKE settlement INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE settlement ATTACH PARTITION settlement_p_before
    FOR VALUES FROM (MINVALUE) TO (uuid_v7_month_floor((now() AT TIME ZONE 'UTC')::date));
SELECT intent_partition_create((now() AT TIME ZONE 'UTC')::date);

INSERT INTO intent SELECT * FROM intent_unpartitioned;
INSERT INTO settlement SELECT * FROM settlement_unpartitioned;
DROP TABLE settlement_unpartitioned;
DROP TABLE intent_unpartitioned;

-- The months ahead of every history table (ledger_transfer, intent, settlement): the partitions of the
-- month of `now` and of the `months_ahead` months after it, those missing created. Returns how many
-- months gained a partition. One caller at a time (a transaction lock): processes starting together
-- do not race to create the same table. Run at start-up and by the storage upkeep (bootstrap.py).
CREATE FUNCTION history_partitions_ensure(now timestamptz, months_ahead integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    first_month date := date_trunc('month', now AT TIME ZONE 'UTC')::date;
    month date;
    ledger_created boolean;
    intent_created boolean;
    created integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(7477, 302);
    FOR i IN 0 .. months_ahead LOOP
        month := (first_month + make_interval(months => i))::date;
        ledger_created := ledger_transfer_partition_create(month);
        intent_created := intent_partition_create(month);
        IF ledger_created OR intent_created THEN
            created := created + 1;
        END IF;
    END LOOP;
    RETURN created;
END
$$;
