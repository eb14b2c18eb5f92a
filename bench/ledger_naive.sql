-- The naive baseline of bench/ledger.py: one transaction per transfer, one row update per account.

-- name: naive_debit
UPDATE ledger_account SET debits_posted = debits_posted + $2 WHERE id = $1;

-- name: naive_credit
UPDATE ledger_account SET credits_posted = credits_posted + $2 WHERE id = $1;

-- name: naive_transfer_insert
INSERT INTO ledger_transfer (id, debit_account_id, credit_account_id, amount, user_data_128, user_data_64,
                             user_data_32, timeout, ledger, code, flags, timestamp)
VALUES ($1, $2, $3, $4, '00000000-0000-0000-0000-000000000000', 0, 0, 0, 1, 1, 0, $5);
