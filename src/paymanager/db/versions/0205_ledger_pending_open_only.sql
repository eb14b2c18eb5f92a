-- ledger_pending keeps only the pending transfers still open (and those that expired): a post or a
-- void deletes the row, and the state of a resolved pending transfer is read from the transfer that
-- resolved it (found by its pending_id), which the ledger keeps anyway. The row no longer repeats
-- the transfer's accounts and amount. Before, two rows per intent were kept forever and each was
-- updated once (a second index entry, the state being in the expiry index's predicate): about 470 of
-- the 5,250 bytes a settled p2p intent cost (docs/BENCHMARKS.md, "Storage").
--
-- Indexes and the queries they serve:
--   ledger_pending_pkey (id): ledger_batch_load's state of a pending transfer; ledger_batch_write;
--   ledger_pending_expiry_idx (expires_at) WHERE pending: pending_expired_candidates (the expiry sweep);
--   ledger_transfer_pending_idx (pending_id): the resolution of a pending transfer whose row is gone
--       (ledger_batch_load), ledger_verify_pending.
CREATE INDEX ledger_transfer_pending_idx ON ledger_transfer (pending_id) WHERE pending_id IS NOT NULL;

DELETE FROM ledger_pending WHERE state IN ('posted', 'voided');
ALTER TABLE ledger_pending DROP COLUMN debit_account_id, DROP COLUMN credit_account_id, DROP COLUMN amount;
ALTER TABLE ledger_pending ADD CONSTRAINT ledger_pending_open CHECK (state IN ('pending', 'expired'));
-- Rows come and go with every hold: vacuumed early so the space is reused.
ALTER TABLE ledger_pending SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.1);

-- As in migration 0200, but the state of a pending transfer without a row is that of the transfer
-- that resolved it: a post (4) or a void (8) naming it as pending_id.
CREATE OR REPLACE FUNCTION ledger_batch_load(account_ids uuid[], pending_ids uuid[], transfer_ids uuid[])
RETURNS TABLE (
    kind text, id uuid, u1 uuid, u2 uuid, u3 uuid, u4 uuid,
    n1 bigint, n2 bigint, n3 bigint, n4 bigint, n5 bigint, n6 bigint, n7 bigint, n8 bigint, n9 bigint,
    n10 bigint, state text
)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    locked uuid[] := account_ids;
BEGIN
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
    PERFORM pg_advisory_xact_lock(s.k)
       FROM (SELECT DISTINCT hashtextextended(w.id::text, 7477) AS k
               FROM unnest(transfer_ids) AS w (id)
              ORDER BY 1) AS s;
    RETURN QUERY
        SELECT 'T', t.id, t.debit_account_id, t.credit_account_id, t.pending_id, t.user_data_128, t.amount,
               t.user_data_64, t.user_data_32, t.timeout, t.ledger, t.code::bigint, t.flags::bigint,
               t.timestamp, p.expires_at, NULL::bigint,
               CASE WHEN t.flags & 2 = 0 THEN NULL
                    WHEN p.state IS NOT NULL THEN p.state
                    WHEN r.flags & 4 <> 0 THEN 'posted'
                    WHEN r.flags & 8 <> 0 THEN 'voided' END
          FROM (SELECT DISTINCT w.id FROM unnest(transfer_ids || pending_ids) AS w (id)) AS w
          JOIN ledger_transfer AS t ON t.id = w.id
          LEFT JOIN ledger_pending AS p ON p.id = t.id
          LEFT JOIN LATERAL (
              SELECT x.flags FROM ledger_transfer AS x
               WHERE x.pending_id = t.id AND t.flags & 2 <> 0 AND p.id IS NULL
               LIMIT 1
          ) AS r ON true;
    RETURN QUERY
        SELECT 'F', f.id, NULL::uuid, NULL::uuid, NULL::uuid, NULL::uuid, NULL::bigint, NULL::bigint,
               NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
               NULL::bigint, NULL::bigint, f.result
          FROM unnest(transfer_ids) AS w (id)
          JOIN ledger_transfer_failed AS f ON f.id = w.id;
END
$$;

-- As in migration 0202, but a pending state that resolves (posted, voided) deletes its row instead of
-- keeping it; the p_debit_account_id, p_credit_account_id and p_amount arrays are no longer stored
-- (the signature stays, so processes of the previous release keep calling it during a deploy).
CREATE OR REPLACE FUNCTION ledger_batch_write(
    t_id uuid[], t_debit_account_id uuid[], t_credit_account_id uuid[], t_amount bigint[],
    t_pending_id uuid[], t_user_data_128 uuid[], t_user_data_64 bigint[], t_user_data_32 bigint[],
    t_timeout bigint[], t_ledger bigint[], t_code int[], t_flags int[], t_timestamp bigint[],
    b_id uuid[], b_debits_pending bigint[], b_debits_posted bigint[], b_credits_pending bigint[],
    b_credits_posted bigint[],
    p_id uuid[], p_debit_account_id uuid[], p_credit_account_id uuid[], p_amount bigint[], p_state text[],
    p_expires_at bigint[],
    f_id uuid[], f_result text[], f_timestamp bigint[]
) RETURNS void
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
BEGIN
    IF cardinality(t_id) > 0 THEN
        INSERT INTO ledger_transfer (id, debit_account_id, credit_account_id, amount, pending_id, user_data_128,
                                     user_data_64, user_data_32, timeout, ledger, code, flags, timestamp)
        SELECT * FROM unnest(t_id, t_debit_account_id, t_credit_account_id, t_amount, t_pending_id,
                             t_user_data_128, t_user_data_64, t_user_data_32, t_timeout, t_ledger, t_code,
                             t_flags, t_timestamp);
    END IF;
    IF cardinality(b_id) > 0 THEN
        UPDATE ledger_account AS a
           SET debits_pending = b.debits_pending, debits_posted = b.debits_posted,
               credits_pending = b.credits_pending, credits_posted = b.credits_posted
          FROM unnest(b_id, b_debits_pending, b_debits_posted, b_credits_pending, b_credits_posted)
               AS b (id, debits_pending, debits_posted, credits_pending, credits_posted)
         WHERE a.id = b.id;
    END IF;
    IF cardinality(p_id) > 0 THEN
        DELETE FROM ledger_pending AS p
         USING unnest(p_id, p_state) AS w (id, state)
         WHERE p.id = w.id AND w.state IN ('posted', 'voided');
        INSERT INTO ledger_pending AS p (id, state, expires_at)
        SELECT w.id, w.state, w.expires_at FROM unnest(p_id, p_state, p_expires_at) AS w (id, state, expires_at)
         WHERE w.state IN ('pending', 'expired')
            ON CONFLICT (id) DO UPDATE SET state = excluded.state;
    END IF;
    IF cardinality(f_id) > 0 THEN
        INSERT INTO ledger_transfer_failed (id, result, timestamp)
        SELECT * FROM unnest(f_id, f_result, f_timestamp)
            ON CONFLICT (id) DO NOTHING;
    END IF;
END
$$;
