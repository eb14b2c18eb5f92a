-- Ledger transfers in fewer bytes, holding the same values (bench/footprint.py; docs/BENCHMARKS.md,
-- "Storage"). A transfer is written once and kept as long as its month, four per settled p2p intent.
--
-- - The u32 columns (user_data_32, timeout, ledger) become integer and the u16 ones (code, flags)
--   smallint, each holding the same bits in two's complement, as user_data_64 (u64) already does in a
--   bigint (migration 0200): 16 bytes fewer per row, no padding between columns. The functions below
--   convert on the way in (ledger_i32, ledger_i16) and out (ledger_u32, ledger_u16), so every reader
--   still sees TigerBeetle's unsigned values and ledger_batch_write keeps its signature.
-- The table is rewritten (its indexes rebuilt): a stop-and-migrate deploy (docs/OPERATIONS.md).
-- The indexes stay as they are, each needed by a query (migrations 0203 and 0205 name them); a hash
-- index for ledger_transfer_pending_idx (equality only, never unique) measured no smaller than the
-- b-tree, so the b-tree stays.

-- SQL functions of one expression, inlined by the planner where they are used.
CREATE FUNCTION ledger_u32(stored integer) RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT stored::bigint & 4294967295
$$;
CREATE FUNCTION ledger_u16(stored smallint) RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT stored::bigint & 65535
$$;
CREATE FUNCTION ledger_i32(value bigint) RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (CASE WHEN value > 2147483647 THEN value - 4294967296 ELSE value END)::integer
$$;
CREATE FUNCTION ledger_i16(value bigint) RETURNS smallint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (CASE WHEN value > 32767 THEN value - 65536 ELSE value END)::smallint
$$;

-- The range checks of the unsigned values (one column each, named by whichever migration made the
-- table) no longer apply to the stored bits; those that say more than the width (ledger and code are
-- never 0) are made again below. Partitions made with LIKE hold copies of their own.
DO $$
DECLARE
    found record;
BEGIN
    FOR found IN
        SELECT c.conrelid::regclass AS rel, c.conname
          FROM pg_constraint AS c
          JOIN pg_attribute AS a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
         WHERE c.contype = 'c' AND cardinality(c.conkey) = 1
           AND a.attname IN ('user_data_32', 'timeout', 'ledger', 'code', 'flags')
           AND c.conrelid IN (SELECT relid FROM pg_partition_tree('ledger_transfer'))
         ORDER BY c.conrelid = 'ledger_transfer'::regclass DESC
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT IF EXISTS %I', found.rel, found.conname);
    END LOOP;
END
$$;

ALTER TABLE ledger_transfer
    ALTER COLUMN user_data_32 TYPE integer USING ledger_i32(user_data_32),
    ALTER COLUMN timeout TYPE integer USING ledger_i32(timeout),
    ALTER COLUMN ledger TYPE integer USING ledger_i32(ledger),
    ALTER COLUMN code TYPE smallint USING ledger_i16(code),
    ALTER COLUMN flags TYPE smallint USING ledger_i16(flags),
    ADD CONSTRAINT ledger_transfer_ledger_check CHECK (ledger <> 0),
    ADD CONSTRAINT ledger_transfer_code_check CHECK (code <> 0);


-- As in migration 0205, reading the stored bits back as unsigned values.
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
               t.user_data_64, ledger_u32(t.user_data_32), ledger_u32(t.timeout), ledger_u32(t.ledger),
               ledger_u16(t.code), ledger_u16(t.flags), t.timestamp, p.expires_at, NULL::bigint,
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

-- As in migration 0205, writing the unsigned values as their stored bits.
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
        SELECT w.id, w.debit_account_id, w.credit_account_id, w.amount, w.pending_id, w.user_data_128,
               w.user_data_64, ledger_i32(w.user_data_32), ledger_i32(w.timeout), ledger_i32(w.ledger),
               ledger_i16(w.code), ledger_i16(w.flags), w.timestamp
          FROM unnest(t_id, t_debit_account_id, t_credit_account_id, t_amount, t_pending_id,
                      t_user_data_128, t_user_data_64, t_user_data_32, t_timeout, t_ledger, t_code,
                      t_flags, t_timestamp)
               AS w (id, debit_account_id, credit_account_id, amount, pending_id, user_data_128, user_data_64,
                     user_data_32, timeout, ledger, code, flags, timestamp);
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
