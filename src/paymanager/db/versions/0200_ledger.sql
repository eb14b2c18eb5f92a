-- The ledger: accounts and transfers with TigerBeetle's semantics (see paymanager/ledger/__init__.py).
--
-- Ids and user_data_128 are u128 stored as uuid (the same 16 bytes, big-endian, so ordering by id
-- is numeric ordering). Amounts and balances are bigint: a deliberate difference from TigerBeetle's
-- u128, so `overflows_*` results fire at 2^63-1. user_data_64 (u64) is stored as bigint holding the
-- same 64 bits (two's complement); ledger, user_data_32 and timeout (u32) as bigint; code and flags
-- (u16) as integer. Timestamps are nanoseconds since the epoch, unique per transfer.

CREATE TABLE ledger_account (
    id              uuid PRIMARY KEY,
    debits_pending  bigint NOT NULL DEFAULT 0 CHECK (debits_pending >= 0),
    debits_posted   bigint NOT NULL DEFAULT 0 CHECK (debits_posted >= 0),
    credits_pending bigint NOT NULL DEFAULT 0 CHECK (credits_pending >= 0),
    credits_posted  bigint NOT NULL DEFAULT 0 CHECK (credits_posted >= 0),
    user_data_128   uuid NOT NULL,
    user_data_64    bigint NOT NULL,
    user_data_32    bigint NOT NULL CHECK (user_data_32 BETWEEN 0 AND 4294967295),
    ledger          bigint NOT NULL CHECK (ledger BETWEEN 1 AND 4294967295),
    code            integer NOT NULL CHECK (code BETWEEN 1 AND 65535),
    flags           integer NOT NULL CHECK (flags BETWEEN 0 AND 65535),
    timestamp       bigint NOT NULL CHECK (timestamp > 0),
    CONSTRAINT ledger_account_id_valid CHECK (
        id <> '00000000-0000-0000-0000-000000000000' AND id <> 'ffffffff-ffff-ffff-ffff-ffffffffffff'
    ),
    -- debits_must_not_exceed_credits (2) and credits_must_not_exceed_debits (4) exclude each other.
    CONSTRAINT ledger_account_flags_exclusive CHECK (flags & 6 <> 6),
    -- The balance limits of the flags, checked by the database as well as by the code (pending
    -- amounts count against the limit, as in TigerBeetle).
    CONSTRAINT ledger_account_debits_within_credits CHECK (
        flags & 2 = 0 OR debits_pending + debits_posted <= credits_posted
    ),
    CONSTRAINT ledger_account_credits_within_debits CHECK (
        flags & 4 = 0 OR credits_pending + credits_posted <= debits_posted
    ),
    -- The code keeps each side's total within bigint, so the sums above cannot overflow.
    CONSTRAINT ledger_account_debits_bounded CHECK (debits_pending <= 9223372036854775807 - debits_posted),
    CONSTRAINT ledger_account_credits_bounded CHECK (credits_pending <= 9223372036854775807 - credits_posted)
) WITH (fillfactor = 50);
-- Balances change in place all day: half-empty pages let every update stay on its page (a HOT
-- update, no new index entry), which is what keeps a hot account from bloating its index entry
-- into a long chain of dead versions to walk on every lock.

-- Transfers are immutable once written, as in TigerBeetle; the state of a pending transfer lives
-- in ledger_pending. There is no foreign key to ledger_account: the batch writer only writes
-- transfers between accounts it holds locked, and a per-row foreign-key check cost a third of a
-- batch's time; `paymanager ledger verify` checks the references instead.
CREATE TABLE ledger_transfer (
    id                uuid PRIMARY KEY,
    debit_account_id  uuid NOT NULL,
    credit_account_id uuid NOT NULL,
    amount            bigint NOT NULL CHECK (amount >= 0),
    pending_id        uuid,
    user_data_128     uuid NOT NULL,
    user_data_64      bigint NOT NULL,
    user_data_32      bigint NOT NULL CHECK (user_data_32 BETWEEN 0 AND 4294967295),
    timeout           bigint NOT NULL CHECK (timeout BETWEEN 0 AND 4294967295),
    ledger            bigint NOT NULL CHECK (ledger BETWEEN 1 AND 4294967295),
    code              integer NOT NULL CHECK (code BETWEEN 1 AND 65535),
    flags             integer NOT NULL CHECK (flags BETWEEN 0 AND 65535),
    timestamp         bigint NOT NULL CHECK (timestamp > 0),
    CONSTRAINT ledger_transfer_accounts_different CHECK (debit_account_id <> credit_account_id),
    -- Only pending transfers carry a timeout; only post/void transfers (4, 8) reference a pending one.
    CONSTRAINT ledger_transfer_timeout_pending CHECK (timeout = 0 OR flags & 2 <> 0),
    CONSTRAINT ledger_transfer_pending_id_post_void CHECK ((pending_id IS NOT NULL) = (flags & 12 <> 0))
);
-- Timestamps are unique (TigerBeetle's are), which makes them a stable pagination cursor.
CREATE UNIQUE INDEX ledger_transfer_timestamp_key ON ledger_transfer (timestamp);
CREATE INDEX ledger_transfer_debit_idx ON ledger_transfer (debit_account_id, timestamp);
CREATE INDEX ledger_transfer_credit_idx ON ledger_transfer (credit_account_id, timestamp);

-- The state of each pending transfer; a pending transfer resolves at most once.
CREATE TABLE ledger_pending (
    id                uuid PRIMARY KEY,
    debit_account_id  uuid NOT NULL,
    credit_account_id uuid NOT NULL,
    amount            bigint NOT NULL CHECK (amount >= 0),
    state             text NOT NULL CHECK (state IN ('pending', 'posted', 'voided', 'expired')),
    expires_at        bigint CHECK (expires_at > 0)
);
CREATE INDEX ledger_pending_expiry_idx ON ledger_pending (expires_at)
    WHERE state = 'pending' AND expires_at IS NOT NULL;

-- Ids whose transfer failed with a transient result (TigerBeetle's `id_already_failed`): retrying
-- such an id must not produce a different outcome later.
CREATE TABLE ledger_transfer_failed (
    id        uuid PRIMARY KEY,
    result    text NOT NULL,
    timestamp bigint NOT NULL CHECK (timestamp > 0)
);

-- What a batch of transfers needs, in one round trip: lock the accounts it touches (those named by
-- its events and those of the pending transfers it posts or voids) in id order, then read the
-- transfers it refers to with their pending state, and the ids that already failed. A VOLATILE
-- function takes a fresh snapshot for each query, so the reads after the locks see every batch that
-- committed before we got them (a state of a pending transfer only changes under its accounts' locks).
-- Rows: ('A', account columns), ('T', transfer columns), ('F', failed id); see ledger/postgres.py.
CREATE FUNCTION ledger_batch_load(account_ids uuid[], pending_ids uuid[], transfer_ids uuid[])
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
