-- A completion writes one index entry: the primary key's. Every state change moves a job to a new
-- row version (the state is in the partial indexes' predicates), and that version enters each index
-- whose predicate it meets; job_finalized_idx took every completed job, the busiest write of the
-- engine, for the pruner alone. Dead and cancelled jobs keep an index by queue and finish time
-- (replays and their retention search them, and they are few); completed jobs are pruned by a
-- walk of the primary key instead (job_prune_completed), once per prune run.
CREATE INDEX job_failed_idx ON job (queue, state, finalized_at) WHERE state IN ('dead', 'cancelled');
DROP INDEX job_finalized_idx;
