-- Statements of bench/ledger.py: the naive baseline (one transaction per transfer, one row update per
-- account) and what the benchmark reads about its own database.

-- name: naive_debit
UPDATE ledger_account SET debits_posted = debits_posted + $2 WHERE id = $1;

-- name: naive_credit
UPDATE ledger_account SET credits_posted = credits_posted + $2 WHERE id = $1;

-- name: naive_transfer_insert
-- A transfer stores its accounts' numbers (migration 0802), looked up from the ids $2 and $3.
INSERT INTO ledger_transfer (id, debit_account_number, credit_account_number, amount, user_data_128,
                             user_data_64, user_data_32, timeout, ledger, code, flags, timestamp)
VALUES ($1, (SELECT number FROM ledger_account WHERE id = $2), (SELECT number FROM ledger_account WHERE id = $3),
        $4, '00000000-0000-0000-0000-000000000000', 0, 0, 0, 1, 1, 0, $5);

-- name: bench_backend_pids
-- The server processes of the benchmark database, whose CPU time the benchmark reads from /proc.
SELECT pid FROM pg_stat_activity WHERE datname = current_database();
