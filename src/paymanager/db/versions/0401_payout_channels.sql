-- The payout channels qp-transfer and wise-transfer (domain/channels.py), beside ipps-transfer: the
-- channel CHECKs of intent and policy are widened to them.
--
-- A populated database: the new CHECKs are added NOT VALID, so this transaction scans nothing and
-- holds its ACCESS EXCLUSIVE locks (of intent, its partitions, and policy) only for the catalogue
-- change; 0402 validates them in a transaction of its own, under SHARE UPDATE EXCLUSIVE, which lets
-- reads and writes go on. The old CHECKs' generated names depend on the migrations a database went
-- through (0302 rebuilt intent), so they are looked up by definition, as 0350 does; dropping a
-- partitioned parent's CHECK drops its partitions' copies, and the new one is added to each.

DO $$
DECLARE
    wanted record;
    found text;
BEGIN
    FOR wanted IN
        SELECT * FROM (VALUES
            ('intent', '%channel = ANY (ARRAY[''internal-p2p''::text, ''ipps-transfer''::text%'),
            ('policy', '%channel = ANY (ARRAY[''internal-p2p''::text, ''ipps-transfer''::text%')
        ) AS w(tab, pattern)
    LOOP
        SELECT conname INTO found
          FROM pg_constraint
         WHERE conrelid = wanted.tab::regclass AND contype = 'c'
           AND pg_get_constraintdef(oid) LIKE wanted.pattern;
        IF found IS NULL THEN
            RAISE EXCEPTION 'no channel CHECK of % matches %', wanted.tab, wanted.pattern;
        END IF;
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', wanted.tab, found);
    END LOOP;
END
$$;

ALTER TABLE intent
    ADD CONSTRAINT intent_channel_check CHECK (channel IN ('internal-p2p', 'ipps-transfer', 'qp-transfer',
        'wise-transfer', 'service-transfer', 'admin-transfer', 'merchant-invoice')) NOT VALID;

ALTER TABLE policy
    ADD CONSTRAINT policy_channel_check CHECK (channel IN ('internal-p2p', 'ipps-transfer', 'qp-transfer',
        'wise-transfer', 'service-transfer', 'admin-transfer', 'merchant-invoice')) NOT VALID;
