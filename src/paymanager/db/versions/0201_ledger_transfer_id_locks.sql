-- Ledger: one key space for transfer ids, created or failed (found by the correctness review: two
-- concurrent batches on disjoint accounts could create an id that the other recorded as failed).
CREATE OR REPLACE FUNCTION ledger_batch_load(account_ids uuid[], pending_ids uuid[], transfer_ids uuid[])
RETURNS TABLE (
    kind text, id uuid, u1 uuid, u2 uuid, u3 uuid, u4 uuid,
    n1 bigint, n2 bigint, n3 bigint, n4 bigint, n5 bigint, n6 bigint, n7 bigint, n8 bigint, n9 bigint,
    n10 bigint, state text
)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    locked uuid[] := account_ids;
BEGIN
    -- PL/pgSQL caches generic plans, and a generic plan of `id = ANY ($1)` may scan the whole
    -- table comparing each row with each id; joining with unnest() keeps every query on the index.
    IF cardinality(pending_ids) > 0 THEN
        locked := locked || ARRAY(
            SELECT unnest(ARRAY[p.debit_account_id, p.credit_account_id])
              FROM unnest(pending_ids) AS w (id)
              JOIN ledger_transfer AS p ON p.id = w.id
        );
    END IF;
    RETURN QUERY
        SELECT 'A', a.id, a.user_data_128, NULL::uuid, NULL::uuid, NULL::uuid, a.debits_pending,
               a.debits_posted, a.credits_pending, a.credits_posted, a.user_data_64, a.user_data_32,
               a.ledger, a.code::bigint, a.flags::bigint, a.timestamp, NULL::text
          FROM ledger_account AS a
         WHERE a.id IN (SELECT DISTINCT w.id FROM unnest(locked) AS w (id))
         ORDER BY a.id
           FOR UPDATE OF a;
    -- Two batches carrying the same NEW transfer id may touch disjoint accounts, so no account lock
    -- orders them: one could record the id as failed while the other creates it. A transaction lock
    -- per id (taken in id order, after the account locks, released at commit) makes the second wait
    -- and then read what the first committed: `exists*` or `id_already_failed`, as TigerBeetle answers.
    PERFORM pg_advisory_xact_lock(s.k)
       FROM (SELECT DISTINCT hashtextextended(w.id::text, 7477) AS k
               FROM unnest(transfer_ids) AS w (id)
              ORDER BY 1) AS s;
    RETURN QUERY
        SELECT 'T', t.id, t.debit_account_id, t.credit_account_id, t.pending_id, t.user_data_128, t.amount,
               t.user_data_64, t.user_data_32, t.timeout, t.ledger, t.code::bigint, t.flags::bigint,
               t.timestamp, p.expires_at, NULL::bigint, p.state
          FROM (SELECT DISTINCT w.id FROM unnest(transfer_ids || pending_ids) AS w (id)) AS w
          JOIN ledger_transfer AS t ON t.id = w.id
          LEFT JOIN ledger_pending AS p ON p.id = t.id;
    RETURN QUERY
        SELECT 'F', f.id, NULL::uuid, NULL::uuid, NULL::uuid, NULL::uuid, NULL::bigint, NULL::bigint,
               NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
               NULL::bigint, NULL::bigint, f.result
          FROM unnest(transfer_ids) AS w (id)
          JOIN ledger_transfer_failed AS f ON f.id = w.id;
END
$$;
