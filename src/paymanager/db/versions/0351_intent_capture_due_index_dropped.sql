-- 0350 (manual capture) created intent_capture_due_idx; 0306 dropped it in favour of intent_due, but on
-- a database created from scratch 0306 runs before 0350, which creates the index again. No query
-- reads it (intent_capture_due goes through intent_due), and its predicate names `status`, which
-- keeps every update of an intent's status from being HOT.
DROP INDEX IF EXISTS intent_capture_due_idx;
