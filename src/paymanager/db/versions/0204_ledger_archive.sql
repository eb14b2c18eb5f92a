-- Archiving a month of ledger transfers (docs/OPERATIONS.md, "Archiving history"): once an operator
-- has detached a partition of ledger_transfer, `ledger_transfer_archive(<table>)` adds its posted
-- amounts per account to ledger_transfer_archived, so `paymanager ledger verify` still finds every
-- balance equal to the sums of its transfers (those kept plus those archived), and forgets the pending
-- states of its transfers. The table can then be dumped and dropped.
CREATE TABLE ledger_transfer_archived (
    account_id     uuid PRIMARY KEY,
    debits_posted  numeric NOT NULL DEFAULT 0,
    credits_posted numeric NOT NULL DEFAULT 0,
    transfers      bigint NOT NULL DEFAULT 0
);
-- Which detached tables were added, so adding one twice is refused.
CREATE TABLE ledger_transfer_archive_log (
    table_name   text PRIMARY KEY,
    transfers    bigint NOT NULL,
    archived_at  timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION ledger_transfer_archive(detached regclass) RETURNS bigint LANGUAGE plpgsql AS $$
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
        SELECT account_id, sum(debits), sum(credits), sum(n)
          FROM (SELECT debit_account_id AS account_id, CASE WHEN flags & 10 = 0 THEN amount ELSE 0 END AS debits,
                       0 AS credits, 1 AS n FROM %1$s
                UNION ALL
                SELECT credit_account_id, 0, CASE WHEN flags & 10 = 0 THEN amount ELSE 0 END, 1 FROM %1$s) AS leg
         GROUP BY account_id
        ON CONFLICT (account_id) DO UPDATE
           SET debits_posted = a.debits_posted + EXCLUDED.debits_posted,
               credits_posted = a.credits_posted + EXCLUDED.credits_posted,
               transfers = a.transfers + EXCLUDED.transfers
    $q$, detached);
    EXECUTE format('DELETE FROM ledger_pending AS p USING %s AS t WHERE p.id = t.id', detached);
    RETURN counted;
END
$$;
