-- The enqueue statements NOTIFY their queues themselves; the insert trigger of 0100 goes.
--
-- The statement trigger cost each enqueue 0.04-0.06 ms on the producer's path (the transition
-- table, a PL/pgSQL call and its query: docs/BENCHMARKS.md, "Enqueue-to-start latency"). `job_insert` now calls pg_notify
-- in its RETURNING list and `job_insert_many` once per queue; NOTIFY stays transactional (delivered
-- at commit, so a rolled-back enqueue wakes nobody) and PostgreSQL folds the same notification
-- repeated within a transaction into one.
--
-- Not additive, and said so in docs/OPERATIONS.md: during a rolling deploy from a release before
-- this migration, the jobs an old process enqueues wake no worker by NOTIFY; workers find them by
-- their polling fallback (WorkerOptions.poll_interval_ms, 1 s by default). Nothing is lost.
DROP TRIGGER job_notify_inserted ON job;
DROP FUNCTION job_notify_inserted();
