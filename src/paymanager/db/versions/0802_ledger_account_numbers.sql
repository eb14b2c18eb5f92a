-- Account numbers in ledger transfers (issue 21; docs/BENCHMARKS.md, "Storage, fourth sitting"). A
-- transfer named its two accounts by their 16-byte ids, in its row and in the two account indexes
-- (ledger_transfer_debit_idx, _credit_idx): four transfers per settled p2p intent, kept as long as their
-- month. Every account now has a bigint `number` (an identity, unique), and a transfer stores its
-- accounts' numbers: 16 bytes fewer per row and 8 per account-index entry.
--
-- The ledger's port is unchanged (a Transfer's debit_account_id is TigerBeetle's u128): the numbers
-- are translated at the edges, in the database. ledger_batch_write keeps its signature and looks the
-- numbers up among the accounts ledger_batch_load has just locked; every read of a transfer
-- (ledger_batch_load, ledger.sql, ledger_transfer_archive) joins back to the account ids. An account's
-- number never changes and accounts are never deleted, so the join always finds it;
-- `paymanager ledger verify` (ledger_verify_references) checks that it does.
--
-- The table is rewritten (its indexes rebuilt): a stop-and-migrate deploy (docs/OPERATIONS.md). A
-- transfer whose account does not exist (none can: see ledger_verify_references) stops the migration
-- on the NOT NULL of its column rather than losing the reference. Partitions made later
-- (ledger_transfer_partition_create, migration 0203) copy the parent's columns with LIKE and get the
-- parent's indexes, the account indexes on the numbers included, when they are attached.

ALTER TABLE ledger_account ADD COLUMN number bigint GENERATED ALWAYS AS IDENTITY;
ALTER TABLE ledger_account ADD CONSTRAINT ledger_account_number_key UNIQUE (number);

-- Only for the conversion below (ALTER ... USING takes no subquery).
CREATE FUNCTION ledger_account_number_of(account uuid) RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT number FROM ledger_account WHERE id = account
$$;

ALTER TABLE ledger_transfer
    ALTER COLUMN debit_account_id TYPE bigint USING ledger_account_number_of(debit_account_id),
    ALTER COLUMN credit_account_id TYPE bigint USING ledger_account_number_of(credit_account_id);
ALTER TABLE ledger_transfer RENAME COLUMN debit_account_id TO debit_account_number;
ALTER TABLE ledger_transfer RENAME COLUMN credit_account_id TO credit_account_number;
DROP FUNCTION ledger_account_number_of(uuid);

-- As in migration 0206, the accounts of the pending transfers and the transfers' accounts read back
-- as account ids through their numbers (ledger_account_number_key). The account joins of a transfer
-- are outer joins: a transfer whose account were missing must still be found (else its id would be
-- written again), and its NULL account id fails the batch in postgres.py instead.
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
            SELECT a.id
              FROM unnest(pending_ids) AS w (id)
              JOIN ledger_transfer AS p ON p.id = w.id
              JOIN ledger_account AS a ON a.number IN (p.debit_account_number, p.credit_account_number)
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
        SELECT 'T', t.id, d.id, c.id, t.pending_id, t.user_data_128, t.amount,
               t.user_data_64, ledger_u32(t.user_data_32), ledger_u32(t.timeout), ledger_u32(t.ledger),
               ledger_u16(t.code), ledger_u16(t.flags), t.timestamp, p.expires_at, NULL::bigint,
               CASE WHEN t.flags & 2 = 0 THEN NULL
                    WHEN p.state IS NOT NULL THEN p.state
                    WHEN r.flags & 4 <> 0 THEN 'posted'
                    WHEN r.flags & 8 <> 0 THEN 'voided' END
          FROM (SELECT DISTINCT w.id FROM unnest(transfer_ids || pending_ids) AS w (id)) AS w
          JOIN ledger_transfer AS t ON t.id = w.id
          LEFT JOIN ledger_account AS d ON d.number = t.debit_account_number
          LEFT JOIN ledger_account AS c ON c.number = t.credit_account_number
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

-- As in migration 0206, the new transfers' account ids written as their accounts' numbers. Those
-- accounts are locked by this transaction's ledger_batch_load (the batch writes no transfer between
-- accounts it does not hold), so each lookup finds its row; a transfer that found none would be
-- dropped by the joins, which the count below refuses instead.
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
DECLARE
    written bigint;
BEGIN
    IF cardinality(t_id) > 0 THEN
        INSERT INTO ledger_transfer (id, debit_account_number, credit_account_number, amount, pending_id,
                                     user_data_128, user_data_64, user_data_32, timeout, ledger, code, flags,
                                     timestamp)
        SELECT w.id, d.number, c.number, w.amount, w.pending_id, w.user_data_128,
               w.user_data_64, ledger_i32(w.user_data_32), ledger_i32(w.timeout), ledger_i32(w.ledger),
               ledger_i16(w.code), ledger_i16(w.flags), w.timestamp
          FROM unnest(t_id, t_debit_account_id, t_credit_account_id, t_amount, t_pending_id,
                      t_user_data_128, t_user_data_64, t_user_data_32, t_timeout, t_ledger, t_code,
                      t_flags, t_timestamp)
               AS w (id, debit_account_id, credit_account_id, amount, pending_id, user_data_128, user_data_64,
                     user_data_32, timeout, ledger, code, flags, timestamp)
          JOIN ledger_account AS d ON d.id = w.debit_account_id
          JOIN ledger_account AS c ON c.id = w.credit_account_id;
        GET DIAGNOSTICS written = ROW_COUNT;
        IF written <> cardinality(t_id) THEN
            RAISE EXCEPTION 'ledger_batch_write: % of % transfers name an account that does not exist',
                cardinality(t_id) - written, cardinality(t_id);
        END IF;
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

-- As in migration 0204, the sums per account of a detached month keyed by account id: summed per
-- account number, then translated.
CREATE OR REPLACE FUNCTION ledger_transfer_archive(detached regclass) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    counted bigint;
    still_pending bigint;
BEGIN
    IF EXISTS (SELECT FROM pg_inherits WHERE inhrelid = detached) THEN
        RAISE EXCEPTION '% is still a partition: detach it first', detached;
    END IF;
    EXECUTE format('SELECT count(*) FROM %s AS t JOIN ledger_pending AS p ON p.id = t.id'
                   ' WHERE p.state = ''pending''', detached) INTO still_pending;
    IF still_pending > 0 THEN
        RAISE EXCEPTION '% holds % pending transfers not yet posted, voided or expired', detached, still_pending;
    END IF;
    EXECUTE format('SELECT count(*) FROM %s', detached) INTO counted;
    INSERT INTO ledger_transfer_archive_log (table_name, transfers) VALUES (detached::text, counted);
    -- A transfer counts in posted balances unless it is pending (2) or a void (8), as in
    -- ledger_verify_account_sums.
    EXECUTE format($q$
        INSERT INTO ledger_transfer_archived AS a (account_id, debits_posted, credits_posted, transfers)
        SELECT account.id, sum(leg.debits), sum(leg.credits), sum(leg.n)
          FROM (SELECT debit_account_number AS number,
                       CASE WHEN flags & 10 = 0 THEN amount ELSE 0 END AS debits, 0 AS credits, 1 AS n
                  FROM %1$s
                UNION ALL
                SELECT credit_account_number, 0, CASE WHEN flags & 10 = 0 THEN amount ELSE 0 END, 1
                  FROM %1$s) AS leg
          JOIN ledger_account AS account ON account.number = leg.number
         GROUP BY account.id
        ON CONFLICT (account_id) DO UPDATE
           SET debits_posted = a.debits_posted + EXCLUDED.debits_posted,
               credits_posted = a.credits_posted + EXCLUDED.credits_posted,
               transfers = a.transfers + EXCLUDED.transfers
    $q$, detached);
    EXECUTE format('DELETE FROM ledger_pending AS p USING %s AS t WHERE p.id = t.id', detached);
    RETURN counted;
END
$$;
