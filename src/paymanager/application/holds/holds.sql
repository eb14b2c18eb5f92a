-- name: decision_insert_many
-- The decisions of $1 (intent ids) not yet taken, then every decision of $1 (the earlier ones win). A
-- capture's decision carries the amount $7 and fee $8 it posts, an uncaptured hold's expiry $9 (a
-- void whose status is stored as 'failed'): both in ledger_decision_capture, in the same statement.
WITH wanted AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $7::bigint[], $8::bigint[],
                         $9::boolean[])
        AS w(intent_id, action, status, reason, amount, fee, expired)
), inserted AS (
    INSERT INTO ledger_decision (intent_id, action, status, reason, decided_by, decided_at)
    SELECT intent_id, action, status, reason, $5, $6 FROM wanted
    ON CONFLICT (intent_id) DO NOTHING
    RETURNING intent_id, action, status, reason
), detailed AS (
    INSERT INTO ledger_decision_capture (intent_id, amount, fee, expired)
    SELECT w.intent_id, w.amount, w.fee, w.expired
      FROM wanted w JOIN inserted i USING (intent_id)
     WHERE w.amount IS NOT NULL OR w.expired
    RETURNING intent_id
)
SELECT i.intent_id, i.action, i.status, i.reason, w.amount, w.fee, w.expired
  FROM inserted i JOIN wanted w USING (intent_id)
UNION ALL
SELECT d.intent_id, d.action, d.status, d.reason, c.amount, c.fee, coalesce(c.expired, false)
  FROM ledger_decision d JOIN wanted w USING (intent_id) LEFT JOIN ledger_decision_capture c USING (intent_id)
 WHERE NOT EXISTS (SELECT 1 FROM inserted i WHERE i.intent_id = d.intent_id);

-- name: decision_get
SELECT d.intent_id, d.action, d.status, d.reason, c.amount, c.fee, coalesce(c.expired, false) AS expired
  FROM ledger_decision d LEFT JOIN ledger_decision_capture c USING (intent_id)
 WHERE d.intent_id = $1;

-- name: hold_take
-- The intent's hold id: the one recorded, else $2 (recorded now).
WITH inserted AS (
    INSERT INTO ledger_hold (intent_id, hold_id) VALUES ($1, $2)
    ON CONFLICT (intent_id) DO NOTHING
    RETURNING hold_id
)
SELECT hold_id FROM inserted
UNION ALL
SELECT hold_id FROM ledger_hold WHERE intent_id = $1 AND NOT EXISTS (SELECT 1 FROM inserted);

-- name: hold_renew
UPDATE ledger_hold SET hold_id = $3 WHERE intent_id = $1 AND hold_id = $2;

-- name: hold_get
SELECT hold_id FROM ledger_hold WHERE intent_id = $1;

-- name: hold_get_many
SELECT intent_id, hold_id FROM ledger_hold WHERE intent_id = ANY($1::uuid[]);
