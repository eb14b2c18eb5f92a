-- The ledger decision of an intent whose ledger cannot join PostgreSQL's transaction (TigerBeetle):
-- post or void, written and committed under the intent's row lock (and the settlement job's lease)
-- BEFORE the ledger is asked. The primary key makes it one decision per intent, so a post and a
-- void of the same hold can never both be attempted: whoever comes later (a retried job, a cancel,
-- the reconciler) finds the decision and carries it out. The intent ends (the `settlement` row) only
-- after the ledger answered. No foreign key to `intent`: the decision is written on a connection of
-- its own while the deciding transaction holds the intent's row lock, and a foreign key check would
-- wait for that lock.
CREATE TABLE ledger_decision (
    intent_id   uuid PRIMARY KEY,
    action      text NOT NULL CHECK (action IN ('post', 'void')),
    -- Where the intent goes once the ledger answered (a post the ledger finds expired fails it).
    status      text NOT NULL CHECK (status IN ('settled', 'failed', 'cancelled')),
    reason      text,
    decided_by  text NOT NULL,
    decided_at  timestamptz NOT NULL,
    CHECK ((action = 'post') = (status = 'settled'))
);

-- The hold id of an intent being confirmed on TigerBeetle, committed before the hold is asked for
-- (on a connection of its own, while the confirming transaction holds the intent's row lock). A
-- confirm that crashed after TigerBeetle's hold and before its commit is retried with the same id,
-- and TigerBeetle answers `exists`; a hold TigerBeetle refused (insufficient funds burns its id:
-- `id_already_failed` on any retry) gets a fresh id for the next confirm. A cancel or expiry of the
-- still created intent voids the hold this id names, if there is one.
CREATE TABLE ledger_hold (
    intent_id   uuid PRIMARY KEY,
    hold_id     uuid NOT NULL UNIQUE
);
