-- Statements of the PostgreSQL ledger (tables in db/versions/0200_ledger.sql).
-- Columns of accounts and transfers are always selected in the order of the Account and Transfer
-- dataclasses, so rows decode positionally. A transfer's u32 and u16 columns are stored as the same
-- bits in integer and smallint (migration 0206): read through ledger_u32 / ledger_u16. A transfer
-- stores its accounts' numbers (ledger_account.number, migration 0802): every read joins back to the
-- account ids, so a Transfer's debit_account_id and credit_account_id are the accounts' u128 ids.

-- name: account_select_many
-- Accounts by id, without locking (lookups).
SELECT id, debits_pending, debits_posted, credits_pending, credits_posted, user_data_128, user_data_64,
       user_data_32, ledger, code, flags, timestamp
  FROM ledger_account
 WHERE id = ANY($1::uuid[]);

-- name: account_insert_many
INSERT INTO ledger_account (id, user_data_128, user_data_64, user_data_32, ledger, code, flags, timestamp)
SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::bigint[], $4::bigint[], $5::bigint[], $6::int[],
                     $7::int[], $8::bigint[]);

-- name: account_list
-- Accounts in id order after $1 (keyset pagination), at most $2; $3 filters by ledger when not 0.
SELECT id, debits_pending, debits_posted, credits_pending, credits_posted, user_data_128, user_data_64,
       user_data_32, ledger, code, flags, timestamp
  FROM ledger_account
 WHERE id > $1::uuid AND ($3::bigint = 0 OR ledger = $3)
 ORDER BY id
 LIMIT $2;

-- name: transfer_select_many
SELECT t.id, d.id AS debit_account_id, c.id AS credit_account_id, t.amount, t.pending_id, t.user_data_128,
       t.user_data_64, ledger_u32(t.user_data_32) AS user_data_32, ledger_u32(t.timeout) AS timeout,
       ledger_u32(t.ledger) AS ledger, ledger_u16(t.code) AS code, ledger_u16(t.flags) AS flags, t.timestamp
  FROM ledger_transfer AS t
  JOIN ledger_account AS d ON d.number = t.debit_account_number
  JOIN ledger_account AS c ON c.number = t.credit_account_number
 WHERE t.id = ANY($1::uuid[]);

-- name: batch_load
-- Locks and reads what a batch touches (see the function ledger_batch_load in migration 0200):
-- $1 account ids of the events, $2 pending ids they post or void, $3 their own ids.
-- The arrays arrive as text literals (see `_uuids` in postgres.py): cheaper to build than binary arrays.
SELECT * FROM ledger_batch_load($1::text::uuid[], $2::text::uuid[], $3::text::uuid[]);

-- name: batch_write
-- Everything a batch changes (see the function ledger_batch_write in migration 0202): $1-$13 new
-- transfers, $14-$18 new balances of the touched accounts, $19-$24 new or resolved pending states,
-- $25-$27 ids burned by transient failures. Every array arrives as one text literal ('{a,b,...}',
-- built by postgres.py): asyncpg's binary array encoder checks each element's type in Python, which
-- cost a fifth of a batch's client time.
SELECT ledger_batch_write(
    $1::text::uuid[], $2::text::uuid[], $3::text::uuid[], $4::text::bigint[], $5::text::uuid[],
    $6::text::uuid[], $7::text::bigint[], $8::text::bigint[], $9::text::bigint[], $10::text::bigint[],
    $11::text::int[], $12::text::int[], $13::text::bigint[],
    $14::text::uuid[], $15::text::bigint[], $16::text::bigint[], $17::text::bigint[], $18::text::bigint[],
    $19::text::uuid[], $20::text::uuid[], $21::text::uuid[], $22::text::bigint[], $23::text::text[],
    $24::text::bigint[],
    $25::text::uuid[], $26::text::text[], $27::text::bigint[]
);

-- name: pending_expired_candidates
-- Pending transfers whose timeout passed at $1 (nanoseconds), oldest first, at most $2.
SELECT p.id, d.id AS debit_account_id, c.id AS credit_account_id
  FROM ledger_pending AS p
  JOIN ledger_transfer AS t ON t.id = p.id
  JOIN ledger_account AS d ON d.number = t.debit_account_number
  JOIN ledger_account AS c ON c.number = t.credit_account_number
 WHERE p.state = 'pending' AND p.expires_at <= $1
 ORDER BY p.expires_at
 LIMIT $2;

-- name: account_transfers_page
-- Transfers of account $1 with $2 <= timestamp <= $3, code $4 (0: any), oldest first, at most $5.
-- Two index range scans (debit side, credit side) merged, so a busy account costs only its page; the
-- account's id is looked up once as its number, and only the page's rows join back to account ids.
SELECT t.id, d.id AS debit_account_id, c.id AS credit_account_id, t.amount, t.pending_id, t.user_data_128,
       t.user_data_64, ledger_u32(t.user_data_32) AS user_data_32, ledger_u32(t.timeout) AS timeout,
       ledger_u32(t.ledger) AS ledger, ledger_u16(t.code) AS code, ledger_u16(t.flags) AS flags, t.timestamp
  FROM (
    (SELECT id, debit_account_number, credit_account_number, amount, pending_id, user_data_128,
            user_data_64, user_data_32, timeout, ledger, code, flags, timestamp
       FROM ledger_transfer
      WHERE debit_account_number = (SELECT number FROM ledger_account WHERE id = $1)
        AND timestamp BETWEEN $2 AND $3
        AND ($4::int = 0 OR code = ledger_i16($4))
      ORDER BY timestamp LIMIT $5)
    UNION ALL
    (SELECT id, debit_account_number, credit_account_number, amount, pending_id, user_data_128,
            user_data_64, user_data_32, timeout, ledger, code, flags, timestamp
       FROM ledger_transfer
      WHERE credit_account_number = (SELECT number FROM ledger_account WHERE id = $1)
        AND timestamp BETWEEN $2 AND $3
        AND ($4::int = 0 OR code = ledger_i16($4))
      ORDER BY timestamp LIMIT $5)
    ORDER BY timestamp
    LIMIT $5
  ) AS t
  JOIN ledger_account AS d ON d.number = t.debit_account_number
  JOIN ledger_account AS c ON c.number = t.credit_account_number
 ORDER BY t.timestamp;

-- name: account_transfers_page_reversed
-- As account_transfers_page, newest first.
SELECT t.id, d.id AS debit_account_id, c.id AS credit_account_id, t.amount, t.pending_id, t.user_data_128,
       t.user_data_64, ledger_u32(t.user_data_32) AS user_data_32, ledger_u32(t.timeout) AS timeout,
       ledger_u32(t.ledger) AS ledger, ledger_u16(t.code) AS code, ledger_u16(t.flags) AS flags, t.timestamp
  FROM (
    (SELECT id, debit_account_number, credit_account_number, amount, pending_id, user_data_128,
            user_data_64, user_data_32, timeout, ledger, code, flags, timestamp
       FROM ledger_transfer
      WHERE debit_account_number = (SELECT number FROM ledger_account WHERE id = $1)
        AND timestamp BETWEEN $2 AND $3
        AND ($4::int = 0 OR code = ledger_i16($4))
      ORDER BY timestamp DESC LIMIT $5)
    UNION ALL
    (SELECT id, debit_account_number, credit_account_number, amount, pending_id, user_data_128,
            user_data_64, user_data_32, timeout, ledger, code, flags, timestamp
       FROM ledger_transfer
      WHERE credit_account_number = (SELECT number FROM ledger_account WHERE id = $1)
        AND timestamp BETWEEN $2 AND $3
        AND ($4::int = 0 OR code = ledger_i16($4))
      ORDER BY timestamp DESC LIMIT $5)
    ORDER BY timestamp DESC
    LIMIT $5
  ) AS t
  JOIN ledger_account AS d ON d.number = t.debit_account_number
  JOIN ledger_account AS c ON c.number = t.credit_account_number
 ORDER BY t.timestamp DESC;

-- name: ledger_verify_totals
-- Sums over all accounts, as numeric so that they cannot overflow.
SELECT count(*) AS accounts,
       coalesce(sum(debits_pending::numeric), 0) AS debits_pending,
       coalesce(sum(debits_posted::numeric), 0) AS debits_posted,
       coalesce(sum(credits_pending::numeric), 0) AS credits_pending,
       coalesce(sum(credits_posted::numeric), 0) AS credits_posted,
       (SELECT count(*) FROM ledger_transfer) AS transfers
  FROM ledger_account;

-- name: ledger_verify_account_sums
-- Accounts whose stored balances differ from the sums of their transfers (at most $1). A transfer
-- adds its amount to posted balances unless it is pending (2) or a void (8); a pending transfer adds
-- it to pending balances while its state is 'pending'. Archived months count by their sums per
-- account (ledger_transfer_archived, migration 0204). A transfer whose account number names no
-- account has no leg here: ledger_verify_references reports it.
WITH leg AS (
    SELECT account_id, 0 AS debits_pending, debits_posted, 0 AS credits_pending, credits_posted
      FROM ledger_transfer_archived
    UNION ALL
    SELECT a.id,
           CASE WHEN t.flags & 2 <> 0 AND p.state = 'pending' THEN t.amount ELSE 0 END,
           CASE WHEN t.flags & 10 = 0 THEN t.amount ELSE 0 END,
           0, 0
      FROM ledger_transfer AS t LEFT JOIN ledger_pending AS p ON p.id = t.id
      JOIN ledger_account AS a ON a.number = t.debit_account_number
    UNION ALL
    SELECT a.id, 0, 0,
           CASE WHEN t.flags & 2 <> 0 AND p.state = 'pending' THEN t.amount ELSE 0 END,
           CASE WHEN t.flags & 10 = 0 THEN t.amount ELSE 0 END
      FROM ledger_transfer AS t LEFT JOIN ledger_pending AS p ON p.id = t.id
      JOIN ledger_account AS a ON a.number = t.credit_account_number
), total AS (
    SELECT account_id, sum(debits_pending) AS debits_pending, sum(debits_posted) AS debits_posted,
           sum(credits_pending) AS credits_pending, sum(credits_posted) AS credits_posted
      FROM leg GROUP BY account_id
)
SELECT a.id, a.debits_pending, a.debits_posted, a.credits_pending, a.credits_posted,
       coalesce(t.debits_pending, 0) AS sum_debits_pending, coalesce(t.debits_posted, 0) AS sum_debits_posted,
       coalesce(t.credits_pending, 0) AS sum_credits_pending,
       coalesce(t.credits_posted, 0) AS sum_credits_posted
  FROM ledger_account AS a
  LEFT JOIN total AS t ON t.account_id = a.id
 WHERE a.debits_pending <> coalesce(t.debits_pending, 0) OR a.debits_posted <> coalesce(t.debits_posted, 0)
    OR a.credits_pending <> coalesce(t.credits_pending, 0)
    OR a.credits_posted <> coalesce(t.credits_posted, 0)
 ORDER BY a.id
 LIMIT $1;

-- name: ledger_verify_flags
-- Accounts whose balances break their flags' limits (at most $1); the CHECK constraints forbid it,
-- so any row here means the schema itself was changed.
SELECT id, flags, debits_pending, debits_posted, credits_pending, credits_posted
  FROM ledger_account
 WHERE (flags & 2 <> 0 AND debits_pending + debits_posted > credits_posted)
    OR (flags & 4 <> 0 AND credits_pending + credits_posted > debits_posted)
    OR flags & 6 = 6
 ORDER BY id
 LIMIT $1;

-- name: ledger_verify_pending
-- Pending transfers with neither a state row (open or expired) nor a post or void that resolved them,
-- or with both (at most $1; migration 0205).
SELECT t.id
  FROM ledger_transfer AS t
  LEFT JOIN ledger_pending AS p ON p.id = t.id
 WHERE t.flags & 2 <> 0
   AND (p.id IS NULL) = NOT EXISTS (SELECT FROM ledger_transfer AS r WHERE r.pending_id = t.id)
 ORDER BY t.id
 LIMIT $1;

-- name: ledger_verify_references
-- Transfers whose accounts do not exist (at most $1). The batch writer only writes transfers
-- between accounts it has locked; a foreign key would check that again per row, at a cost the
-- benchmark showed to be a third of a batch's time, so this query checks it instead.
SELECT t.id
  FROM ledger_transfer AS t
 WHERE NOT EXISTS (SELECT 1 FROM ledger_account AS a WHERE a.number = t.debit_account_number)
    OR NOT EXISTS (SELECT 1 FROM ledger_account AS a WHERE a.number = t.credit_account_number)
 ORDER BY t.id
 LIMIT $1;

-- name: ledger_verify_duplicate_ids
-- Transfer ids found in more than one partition (at most $1). Each partition's index keeps its ids
-- unique; across partitions the batch writer does (migration 0203), and this checks it did.
SELECT id FROM ledger_transfer GROUP BY id HAVING count(*) > 1 ORDER BY id LIMIT $1;

-- name: ledger_ping
SELECT 1;
