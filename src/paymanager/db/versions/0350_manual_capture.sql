-- Manual capture (docs/state_machines.md, "Intents"): an intent created with capture_method 'manual'
-- is confirmed into 'requires_capture' (its funds held, no settlement job); a capture posts part or
-- all of the hold and ends it 'settled' with the captured amount and fee; a cancel voids the hold
-- ('cancelled'); the capture deadline (settle_deadline_at) passed voids it ('expired').
--
-- The CHECKs of 0302 are replaced on the partitioned parents; their partitions inherit them (a
-- partition's copy is dropped with its parent's and the new one is added to every partition, each
-- scanned once under the parent's lock). Their generated names are looked up by definition, since
-- they depend on the migrations a database went through.

DO $$
DECLARE
    wanted record;
    found text;
BEGIN
    FOR wanted IN
        SELECT * FROM (VALUES
            ('intent', '%status = ANY (ARRAY[''created''::text, ''confirmed''::text%'),
            ('intent', '%(status <> ''expired''::text) OR (channel = ''merchant-invoice''::text)%'),
            ('settlement', '%status = ANY (ARRAY[''settled''::text, ''failed''::text, ''cancelled''::text])%')
        ) AS w(tab, pattern)
    LOOP
        SELECT conname INTO found
          FROM pg_constraint
         WHERE conrelid = wanted.tab::regclass AND contype = 'c'
           AND pg_get_constraintdef(oid) LIKE wanted.pattern;
        IF found IS NULL THEN
            RAISE EXCEPTION 'no CHECK of % matches %', wanted.tab, wanted.pattern;
        END IF;
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', wanted.tab, found);
    END LOOP;
END
$$;

ALTER TABLE intent
    ADD COLUMN capture_method text NOT NULL DEFAULT 'automatic',
    -- Set by a capture, with the settlement: what was posted of the held amount and fee.
    ADD COLUMN amount_captured bigint,
    ADD COLUMN fee_captured bigint,
    ADD CONSTRAINT intent_status_check CHECK (status IN ('created', 'confirmed', 'requires_capture',
        'settled', 'failed', 'cancelled', 'expired')),
    ADD CONSTRAINT intent_capture_method_check CHECK (capture_method IN ('automatic', 'manual')),
    -- An invoice expires unconfirmed; a manual intent also expires uncaptured.
    ADD CONSTRAINT intent_expired_check CHECK (
        status <> 'expired' OR channel = 'merchant-invoice' OR capture_method = 'manual'),
    ADD CONSTRAINT intent_requires_capture_check CHECK (
        status <> 'requires_capture'
        OR (capture_method = 'manual' AND confirmed_at IS NOT NULL AND settle_deadline_at IS NOT NULL
            AND hold_id IS NOT NULL)),
    ADD CONSTRAINT intent_captured_check CHECK (
        (amount_captured IS NULL) = (fee_captured IS NULL)
        AND (amount_captured IS NULL OR (capture_method = 'manual' AND status = 'settled'
             AND amount_captured > 0 AND amount_captured <= amount
             AND fee_captured >= 0 AND fee_captured <= fee)));

-- intent_capture_due (the expiry of uncaptured holds, invoice-expiry role and the reconciler).
CREATE INDEX intent_capture_due_idx ON intent (settle_deadline_at) WHERE status = 'requires_capture';

ALTER TABLE settlement
    ADD CONSTRAINT settlement_status_check CHECK (status IN ('settled', 'failed', 'cancelled', 'expired'));

-- What a decision of `ledger_decision` (migration 0700, TigerBeetle's decide-then-apply) cannot say
-- itself, for manual intents: the part of the hold a capture posts (NULL: all of it), or that a void
-- ends an uncaptured hold as expired (its ledger_decision row says 'failed', which its CHECK allows).
-- Written in the statement that inserts the decision (holds.sql `decision_insert_many`), so a capture
-- that crashed after deciding is finished with the amount it decided, by whoever comes next. Its own
-- table because 0700 comes after this migration; no foreign key, as for ledger_decision.
CREATE TABLE ledger_decision_capture (
    intent_id  uuid PRIMARY KEY,
    amount     bigint CHECK (amount > 0),
    fee        bigint CHECK (fee >= 0),
    expired    boolean NOT NULL DEFAULT false,
    CHECK ((amount IS NULL) = (fee IS NULL)),
    CHECK ((amount IS NOT NULL) <> expired)
);

-- The schema refuses any status change the state machine does not draw (domain/intents.py).
CREATE OR REPLACE FUNCTION intent_check_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = OLD.status THEN
        RETURN NEW;
    END IF;
    IF NOT (
        (OLD.status = 'created' AND NEW.status IN ('confirmed', 'requires_capture', 'cancelled', 'expired'))
        OR (OLD.status = 'confirmed' AND NEW.status IN ('settled', 'failed', 'cancelled'))
        OR (OLD.status = 'requires_capture' AND NEW.status IN ('settled', 'failed', 'cancelled', 'expired'))
    ) THEN
        RAISE EXCEPTION 'intent % cannot go from % to %', OLD.id, OLD.status, NEW.status
            USING ERRCODE = 'check_violation', CONSTRAINT = 'intent_transition';
    END IF;
    IF NEW.version <> OLD.version + 1 THEN
        RAISE EXCEPTION 'intent % status change must increase version by one', OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'intent_version';
    END IF;
    RETURN NEW;
END
$$;
