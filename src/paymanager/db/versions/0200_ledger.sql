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
);

-- Transfers are immutable once written, as in TigerBeetle; the state of a pending transfer lives
-- in ledger_pending.
CREATE TABLE ledger_transfer (
    id                uuid PRIMARY KEY,
    debit_account_id  uuid NOT NULL REFERENCES ledger_account (id),
    credit_account_id uuid NOT NULL REFERENCES ledger_account (id),
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
    id                uuid PRIMARY KEY REFERENCES ledger_transfer (id),
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
