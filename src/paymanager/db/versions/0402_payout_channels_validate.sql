-- Validates the channel CHECKs 0401 added NOT VALID, apart from it: VALIDATE CONSTRAINT scans every
-- row (each partition of intent) under SHARE UPDATE EXCLUSIVE, so payments go on meanwhile. Every row
-- passes: the old CHECKs, valid until 0401 replaced them, allowed a subset of the new list.

ALTER TABLE intent VALIDATE CONSTRAINT intent_channel_check;
ALTER TABLE policy VALIDATE CONSTRAINT policy_channel_check;
