-- A settlement row keeps what its intent does not say (bench/footprint.py; docs/BENCHMARKS.md,
-- "Storage"): that the intent's hold was ended once (its primary key), how (`outcome`), by whom
-- (`settled_by`) and when. Its status, amount, fee and currency repeated the intent's: the status is
-- the intent's final one (a final status never changes, intent_check_transition), and what a capture
-- posted is the intent's amount_captured and fee_captured. Readers take them from the intent
-- (refunds.sql `refund_settled`).
--
-- Dropping a column rewrites nothing: rows of the previous release keep those bytes until their
-- partition is detached (or rewritten by VACUUM FULL); new rows store the four as absent. The
-- previous release's inserts name the columns: a stop-and-migrate deploy (docs/OPERATIONS.md).
-- The CHECK tying outcome to status goes with the status; tests/support/invariants.py checks the
-- outcome against the intent's status instead.
ALTER TABLE settlement
    DROP COLUMN status,
    DROP COLUMN amount,
    DROP COLUMN fee,
    DROP COLUMN currency;
