-- Ledger: the plans of a batch's statements, found by profiling bench/ledger.py (figures in
-- docs/BENCHMARKS.md).
--
-- 1. Every lookup of ledger_batch_load is "these ids, by primary key", so its plans are pinned to
--    index nested loops. PL/pgSQL keeps a plan per statement for the life of a connection; one
--    chosen while a table was still small (a new database, before autovacuum's first ANALYZE)
--    hash-joined a sequential scan of ledger_transfer and stayed while the table grew: at 20,000
--    transfers the lookup of a batch's own ids took 7.6 ms instead of 0.1 ms.
-- 2. The plans are generic, made once per connection: for small batches PostgreSQL judged a plan
--    made for the exact arrays cheaper and planned every statement again on every call, which
--    was a quarter of the server's CPU time for a batch of one transfer.
ALTER FUNCTION ledger_batch_load(uuid[], uuid[], uuid[])
    SET plan_cache_mode = force_generic_plan
    SET enable_seqscan = off
    SET enable_hashjoin = off
    SET enable_mergejoin = off;

-- 3. The writes of a batch move from one statement sent by the client (planned again on every
--    call for small batches, as above) into this function, with the same settings. It writes new
--    transfers, the new balances of the touched accounts (one row each), new or resolved pending
--    states, and the ids burned by transient failures; a statement whose arrays are empty is skipped.
CREATE FUNCTION ledger_batch_write(
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
        INSERT INTO ledger_pending AS p (id, debit_account_id, credit_account_id, amount, state, expires_at)
        SELECT * FROM unnest(p_id, p_debit_account_id, p_credit_account_id, p_amount, p_state, p_expires_at)
            ON CONFLICT (id) DO UPDATE SET state = excluded.state;
    END IF;
    IF cardinality(f_id) > 0 THEN
        INSERT INTO ledger_transfer_failed (id, result, timestamp)
        SELECT * FROM unnest(f_id, f_result, f_timestamp)
            ON CONFLICT (id) DO NOTHING;
    END IF;
END
$$;
