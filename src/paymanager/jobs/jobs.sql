-- Every runtime statement of the job engine, called by name (paymanager.db.sql.load_queries).
-- `now` is a parameter where a test must control time (maintenance); elsewhere the server's clock.

-- name: job_insert
-- Inserts one job unless its queue is full or an unfinished job holds its unique key.
-- $1 queue, $2 kind, $3 payload, $4 priority, $5 run_at (NULL: now), $6 delay_ms, $7 max_attempts,
-- $8 backoff, $9 unique_key, $10 timeout_ms, $11 parent_id, $12 state override (NULL: by run_at),
-- $13 pending_children, $14 on_child_dead, $15 lifo, $16 parent_policy (NULL: the parent's),
-- $17 notify: false when the caller wakes the queue's workers after its commit (db/notices.py)
-- A LIFO job ($15) runs before the waiting jobs of its priority, the newest first: its run_at is
-- the enqueue time mirrored about the Unix epoch, so the claims' one order (priority, run_at, id)
-- serves it (docs/state_machines.md, "LIFO").
WITH target AS (
    SELECT CASE WHEN $15::boolean THEN timestamptz 'epoch' - (now() - timestamptz 'epoch')
                ELSE coalesce($5::timestamptz, now()) + make_interval(secs => coalesce($6::bigint, 0) / 1000.0)
           END AS run_at
), settings AS (
    -- The queue's row, read once: its depth limit, and whether it publishes `waiting` events.
    SELECT q.max_depth, q.waiting_events FROM job_queue q WHERE q.name = $1
), full_queue AS (
    SELECT 1 FROM settings q
     WHERE q.max_depth IS NOT NULL
       AND (SELECT count(*) FROM (
                SELECT 1 FROM job j
                 WHERE j.queue = $1
                   AND j.state IN ('available', 'scheduled', 'retryable', 'running', 'waiting_children')
                 LIMIT q.max_depth) AS d) >= q.max_depth
)
INSERT INTO job (queue, kind, payload, priority, run_at, max_attempts, backoff, unique_key, timeout_ms,
                 parent_id, state, pending_children, on_child_dead, parent_policy)
SELECT $1, $2, $3, $4, target.run_at, $7, $8, $9, $10, $11,
       coalesce($12::job_state,
                CASE WHEN target.run_at > now() THEN 'scheduled'::job_state ELSE 'available'::job_state END),
       $13, $14, $16
  FROM target
 WHERE NOT EXISTS (SELECT 1 FROM full_queue)
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state NOT IN ('completed', 'dead', 'cancelled')
DO NOTHING
RETURNING id, CASE WHEN state = 'available' AND $17::boolean THEN pg_notify('pm_job_available', queue) END AS notified,
          CASE WHEN state = 'available' AND (SELECT s.waiting_events FROM settings AS s)
               THEN pg_notify('pm_job_events', json_build_array(json_build_object(
                        'e', 'waiting', 'id', id, 'k', kind, 'q', queue))::text) END AS waiting

-- name: job_dedup_take
-- Takes deduplication key $1 for $2 ms unless it is held: a key is held until it expires, and for a
-- debounce ($3) only while its job still waits (scheduled or available). A row comes back when the
-- key is taken; the conflicting row is locked either way, so a second enqueue with the key waits
-- for the first one's transaction and then sees its job.
INSERT INTO job_dedup (key, job_id, expires_at) VALUES ($1, NULL, now() + make_interval(secs => $2::bigint / 1000.0))
ON CONFLICT (key) DO UPDATE SET job_id = NULL, expires_at = EXCLUDED.expires_at
 WHERE job_dedup.expires_at <= now()
    OR ($3::boolean AND NOT EXISTS (SELECT 1 FROM job WHERE job.id = job_dedup.job_id
                                       AND job.state IN ('scheduled', 'available')))
RETURNING key

-- name: job_dedup_set_job
UPDATE job_dedup SET job_id = $2 WHERE key = $1

-- name: job_dedup_holder
SELECT job_id FROM job_dedup WHERE key = $1

-- name: job_dedup_replace
-- Debounce: the job holding key $1, if it still waits, takes payload $2 and priority $6 and runs at
-- $3 (NULL: now) plus $5 ms (its delay starts again), or LIFO ($7, the run_at of job_insert); the
-- key's time to live starts again too ($4 ms). No row: the job has started (or is gone).
WITH target AS (
    SELECT CASE WHEN $7::boolean THEN timestamptz 'epoch' - (now() - timestamptz 'epoch')
                ELSE coalesce($3::timestamptz, now()) + make_interval(secs => coalesce($5::bigint, 0) / 1000.0)
           END AS run_at
), replaced AS (
    UPDATE job
       SET payload = $2, priority = $6, run_at = target.run_at,
           state = CASE WHEN target.run_at > now() THEN 'scheduled'::job_state ELSE 'available'::job_state END
      FROM target
     WHERE job.id = (SELECT d.job_id FROM job_dedup AS d WHERE d.key = $1)
       AND job.state IN ('scheduled', 'available')
    RETURNING job.id, job.queue, job.state
), extended AS (
    UPDATE job_dedup SET expires_at = now() + make_interval(secs => $4::bigint / 1000.0)
     WHERE key = $1 AND EXISTS (SELECT 1 FROM replaced)
)
SELECT r.id, CASE WHEN r.state = 'available' THEN pg_notify('pm_job_available', r.queue) END AS notified
  FROM replaced AS r

-- name: job_dedup_prune
-- Deletes up to $1 deduplication keys that expired.
DELETE FROM job_dedup WHERE key IN (
    SELECT key FROM job_dedup WHERE expires_at <= now() LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING 1

-- name: job_find_unfinished_by_key
SELECT id FROM job
 WHERE unique_key = $1 AND state NOT IN ('completed', 'dead', 'cancelled')

-- name: job_queue_is_full
SELECT EXISTS (
    SELECT 1 FROM job_queue q
     WHERE q.name = $1 AND q.max_depth IS NOT NULL
       AND (SELECT count(*) FROM (
                SELECT 1 FROM job j
                 WHERE j.queue = $1
                   AND j.state IN ('available', 'scheduled', 'retryable', 'running', 'waiting_children')
                 LIMIT q.max_depth) AS d) >= q.max_depth)

-- name: job_insert_many
-- Inserts many jobs in one statement (no unique keys, no parents: those go through job_insert),
-- and wakes each queue that got an available job once. Ids come back in input order. A queue with
-- waiting_events gets a `waiting` event per available job (chunks of 25, as the completions').
-- The payloads come as ONE JSON array in text ($3), and a column NULL for every job as a NULL
-- array ($5-$8: ROWS FROM pads a function that returns no rows with NULLs): the driver's encoding
-- of an array costs several type checks per element and a call of the JSON codec per payload,
-- the largest part of the client's time per job (docs/BENCHMARKS.md, "Bulk enqueue: the payloads
-- as one JSON array"). ROWS FROM zips the functions' rows in input order, so the jobs are
-- inserted, and their ids returned, in that order.
WITH inserted AS (
    INSERT INTO job (queue, kind, payload, priority, run_at, max_attempts, backoff, timeout_ms, state)
    SELECT r.queue, r.kind, r.payload, r.priority, coalesce(r.run_at, now()), r.max_attempts, r.backoff,
           r.timeout_ms,
           CASE WHEN r.run_at > now() THEN 'scheduled'::job_state ELSE 'available'::job_state END
      FROM ROWS FROM (unnest($1::text[]), unnest($2::text[]), jsonb_array_elements($3::text::jsonb),
                      unnest($4::integer[]), unnest($5::timestamptz[]), unnest($6::integer[]),
                      unnest($7::jsonb[]), unnest($8::integer[]))
           AS r(queue, kind, payload, priority, run_at, max_attempts, backoff, timeout_ms)
    RETURNING id, queue, kind, state
), woken AS (
    SELECT pg_notify('pm_job_available', q.queue)
      FROM (SELECT DISTINCT i.queue FROM inserted AS i WHERE i.state = 'available') AS q
), waiting AS (
    SELECT pg_notify('pm_job_events', json_agg(json_build_object(
               'e', 'waiting', 'id', n.id, 'k', n.kind, 'q', n.queue))::text)
      FROM (SELECT i.id, i.kind, i.queue, (row_number() OVER () - 1) / 25 AS chunk
              FROM inserted AS i
             -- Uncorrelated: checked once, so without such a queue the inserted rows are not read.
             WHERE EXISTS (SELECT 1 FROM job_queue AS q WHERE q.waiting_events)
               AND i.state = 'available'
               AND i.queue IN (SELECT q.name FROM job_queue AS q WHERE q.waiting_events)) AS n
     GROUP BY n.chunk
)
SELECT i.id FROM inserted AS i WHERE (SELECT count(*) FROM woken) >= 0 AND (SELECT count(*) FROM waiting) >= 0

-- name: job_claim_batch
-- Completes the jobs of the previous batch and claims the next one, in ONE statement and so one
-- commit (commits, each a WAL flush, bound a durable queue's throughput).
-- Completes jobs $5[i] still held under lease tokens $6[i] with results $7[i] ($7 NULL: no result
-- for any, as unnest pads a NULL array's column with NULLs); then claims, for
-- each queue $1[i], up to $2[i] available jobs for owner $3, each with a
-- fresh lease token and a lease of $4 ms. Returns claimed rows (`claimed` true) and the ids of the
-- completed ones (`claimed` false). A queue that is paused, or has a limit (a rate, a global
-- concurrency, a pause asked by a handler), is not claimed here but by job_claim_limited_take (in
-- this statement's limited form, job_claim_batch_limited in _queries.py, or job_claim_limited): the
-- row read is the same one a paused queue needs, so a queue without limits pays nothing more.
-- `id = ANY(ARRAY(...))` makes the planner update by primary key;
-- a join on the CTE let it hash-join a scan of the whole table. A completion matches on id and lease
-- token only: a token is held by a running job alone (CHECK job_lease_iff_running), and with
-- `state = 'running'` in the condition the generic plan AND-ed a bitmap of the whole running-lease
-- index into each row's primary-key probe (docs/BENCHMARKS.md, "Figures behind the job engine's code").
-- The scan runs before `done` (the final SELECT reads `claimed` first). A scan may leave a lock on a
-- job another worker runs (a row claimed after this statement's snapshot: FOR UPDATE locks its
-- newest version, and the recheck then drops it), so that worker's completions wait for this
-- commit; rarely two claims each hold what the other's completions wait for, a deadlock the claim
-- sessions' lock_timeout breaks (one claim fails and is retried; nothing is lost). Completing first
-- was slower (docs/BENCHMARKS.md, "Limited claims that complete"): the later a scan starts after
-- its snapshot, the more such rows it meets. So was taking the completed rows FOR NO KEY UPDATE SKIP
-- LOCKED and deferring the held ones to a later write (docs/BENCHMARKS.md, "Completions that skip
-- held rows"): a row lock per completed job costs CPU on full cores, a wait costs none.
WITH done AS (
    UPDATE job
       SET state = 'completed', finalized_at = now(), result = r.result,
           lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
      FROM unnest($5::bigint[], $6::uuid[], $7::jsonb[]) AS r(id, token, result)
     WHERE job.id = ANY ($5::bigint[]) AND job.id = r.id AND job.lease_token = r.token
    RETURNING job.id, job.kind, job.queue, job.attempt
), notified AS (
    -- `completed` events ($8 true), in chunks of 25 so a payload stays under NOTIFY's 8000 bytes.
    -- The JSON is concatenated: json_build_object and json_agg cost the backend several times as
    -- much per event (docs/BENCHMARKS.md, "PostgreSQL's work per claimed job"), and queue and kind
    -- names need no escaping, their domains (job_queue_name, job_kind_name) admitting only
    -- [A-Za-z0-9_.:-].
    SELECT pg_notify('pm_job_events', '[' || string_agg(
               '{"e":"completed","id":' || n.id || ',"k":"' || n.kind || '","q":"' || n.queue
               || '","a":' || n.attempt || '}', ',') || ']')
      FROM (SELECT d.*, (row_number() OVER () - 1) / 25 AS chunk FROM done AS d) AS n
     WHERE $8::boolean
     GROUP BY n.chunk
), woken AS (
    -- A completed job of a queue with a global concurrency freed a slot: the queue's workers
    -- everywhere are woken by this commit, where a wake of its own (job_queue_wake) would be one
    -- more transaction per batch. Without such a queue this reads job_queue's rows alone.
    SELECT pg_notify('pm_job_available', q.name)
      FROM job_queue AS q
     WHERE q.concurrency_max IS NOT NULL AND q.name IN (SELECT d.queue FROM done AS d)
), wanted AS (
    SELECT w.queue, w.wanted
      FROM unnest($1::text[], $2::integer[]) AS w(queue, wanted)
     WHERE w.wanted > 0
       AND NOT EXISTS (SELECT 1 FROM job_queue q WHERE q.name = w.queue AND (q.paused OR q.rate_max IS NOT NULL
                       OR q.concurrency_max IS NOT NULL OR q.rate_paused_until > now()))
), locked AS (
    SELECT picked.id
      FROM wanted
     CROSS JOIN LATERAL (
        SELECT j.id FROM job j
         WHERE j.state = 'available' AND j.queue = wanted.queue
         ORDER BY j.priority, j.run_at, j.id
         LIMIT wanted.wanted
           FOR UPDATE SKIP LOCKED) AS picked
), claimed AS (
    UPDATE job
       SET state = 'running',
           attempt = job.attempt + 1,
           attempted_at = now(),
           lease_owner = $3,
           -- A lease token is unique per attempt: 8 random bytes drawn once per statement (an
           -- InitPlan), then the job's id, which no two jobs of one claim share. One
           -- gen_random_uuid() per job cost the backend three times as much (docs/BENCHMARKS.md,
           -- "Lease tokens drawn once per claim"); job_claim and job_claim_queue do the same.
           lease_token = encode(overlay(uuid_send((SELECT gen_random_uuid()))
                                        placing int8send(job.id) from 9 for 8), 'hex')::uuid,
           lease_expires_at = now() + $4::bigint * interval '1 millisecond'
     WHERE job.id = ANY (ARRAY(SELECT locked.id FROM locked))
       -- $9 true (the worker passes it only when this statement completes nothing): commit without
       -- waiting for the WAL flush. A claim lost in a crash of the server leaves its jobs available,
       -- as a worker's crash does; every completion stays durable, and flushes this claim with it.
       -- Set before the commit that reads it, once per statement: as a subquery the call is an
       -- InitPlan under a one-time filter, not a call per claimed row, and no row carries it. A
       -- claim of nothing sets it too, and writes nothing its commit could flush.
       AND (NOT $9::boolean OR (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL)
    RETURNING job.id, job.queue, job.kind, job.payload, job.priority, job.attempt, job.max_attempts,
              job.backoff, job.timeout_ms, job.lease_token, job.parent_id, job.cancel_requested,
              date_part('epoch', now() - job.run_at) AS waited_s
)
SELECT true AS claimed, c.id, c.queue, c.kind, c.payload, c.priority, c.attempt, c.max_attempts,
       c.backoff, c.timeout_ms, c.lease_token, c.parent_id, c.cancel_requested, c.waited_s
  FROM claimed AS c
UNION ALL
SELECT false, d.id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
  FROM done AS d
 WHERE (SELECT count(*) FROM notified) >= 0 AND (SELECT count(*) FROM woken) >= 0

-- name: job_claim
-- job_claim_batch with nothing to complete: an idle worker's claim, on the enqueue-to-start path.
-- The same claim without the completion, event and UNION parts, whose setup and execution weigh on
-- each one-job claim (docs/BENCHMARKS.md, "Figures behind the job engine's code"). $1 queues,
-- $2 wanted per queue, $3 owner, $4 lease ms, $5 quick (commit without waiting for the flush, set
-- as in job_claim_batch).
-- Its `wanted`, `locked` and update parts are job_claim_batch's: change both together
-- (test_the_idle_claims_and_the_batch_claim_take_the_same_jobs holds them to the same jobs).
WITH wanted AS (
    SELECT w.queue, w.wanted
      FROM unnest($1::text[], $2::integer[]) AS w(queue, wanted)
     WHERE w.wanted > 0
       AND NOT EXISTS (SELECT 1 FROM job_queue q WHERE q.name = w.queue AND (q.paused OR q.rate_max IS NOT NULL
                       OR q.concurrency_max IS NOT NULL OR q.rate_paused_until > now()))
), locked AS (
    SELECT picked.id
      FROM wanted
     CROSS JOIN LATERAL (
        SELECT j.id FROM job j
         WHERE j.state = 'available' AND j.queue = wanted.queue
         ORDER BY j.priority, j.run_at, j.id
         LIMIT wanted.wanted
           FOR UPDATE SKIP LOCKED) AS picked
)
UPDATE job
   SET state = 'running',
       attempt = job.attempt + 1,
       attempted_at = now(),
       lease_owner = $3,
       lease_token = encode(overlay(uuid_send((SELECT gen_random_uuid()))
                                    placing int8send(job.id) from 9 for 8), 'hex')::uuid,
       lease_expires_at = now() + $4::bigint * interval '1 millisecond'
 WHERE job.id = ANY (ARRAY(SELECT locked.id FROM locked))
   AND (NOT $5::boolean OR (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL)
RETURNING true AS claimed, job.id, job.queue, job.kind, job.payload, job.priority, job.attempt,
          job.max_attempts, job.backoff, job.timeout_ms, job.lease_token, job.parent_id, job.cancel_requested,
          -- How long the job waited since it was due (paymanager_job_wait_seconds).
          date_part('epoch', now() - job.run_at) AS waited_s

-- name: job_claim_queue
-- job_claim for one queue ($1): an idle worker's claim when one queue may have work (a NOTIFY names
-- one), without the unnest and lateral join that serve several (docs/BENCHMARKS.md, "Figures behind the job engine's code").
-- $2 wanted, $3 owner, $4 lease ms, $5 quick. The same claim as job_claim and
-- job_claim_batch: change them together (test_the_idle_claims_and_the_batch_claim_take_the_same_jobs).
UPDATE job
   SET state = 'running',
       attempt = job.attempt + 1,
       attempted_at = now(),
       lease_owner = $3,
       lease_token = encode(overlay(uuid_send((SELECT gen_random_uuid()))
                                    placing int8send(job.id) from 9 for 8), 'hex')::uuid,
       lease_expires_at = now() + $4::bigint * interval '1 millisecond'
 WHERE job.id = ANY (ARRAY(
        SELECT j.id FROM job j
         WHERE j.state = 'available' AND j.queue = $1
           AND NOT EXISTS (SELECT 1 FROM job_queue q WHERE q.name = $1 AND (q.paused OR q.rate_max IS NOT NULL
                           OR q.concurrency_max IS NOT NULL OR q.rate_paused_until > now()))
         ORDER BY j.priority, j.run_at, j.id
         LIMIT $2
           FOR UPDATE SKIP LOCKED))
   AND (NOT $5::boolean OR (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL)
RETURNING true AS claimed, job.id, job.queue, job.kind, job.payload, job.priority, job.attempt,
          job.max_attempts, job.backoff, job.timeout_ms, job.lease_token, job.parent_id, job.cancel_requested,
          -- How long the job waited since it was due (paymanager_job_wait_seconds).
          date_part('epoch', now() - job.run_at) AS waited_s

-- name: job_promote_due
-- Makes scheduled and retryable jobs whose time has come available (bounded), waking their queues;
-- a queue with waiting_events gets a `waiting` event per job (chunks of 25).
WITH due AS (
    SELECT id FROM job
     WHERE state IN ('scheduled', 'retryable') AND run_at <= coalesce($1::timestamptz, now())
     ORDER BY run_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), promoted AS (
    UPDATE job SET state = 'available' FROM due WHERE job.id = due.id RETURNING job.id, job.kind, job.queue
), waiting AS (
    SELECT pg_notify('pm_job_events', json_agg(json_build_object(
               'e', 'waiting', 'id', n.id, 'k', n.kind, 'q', n.queue))::text)
      FROM (SELECT p.id, p.kind, p.queue, (row_number() OVER () - 1) / 25 AS chunk
              FROM promoted AS p
             WHERE EXISTS (SELECT 1 FROM job_queue AS q WHERE q.waiting_events)
               AND p.queue IN (SELECT q.name FROM job_queue AS q WHERE q.waiting_events)) AS n
     GROUP BY n.chunk
)
SELECT q.queue, count(*) AS n, pg_notify('pm_job_available', q.queue)
  FROM promoted AS q WHERE (SELECT count(*) FROM waiting) >= 0 GROUP BY q.queue

-- name: job_complete_many
-- Completes jobs still held under the given lease tokens; returns those completed, with their
-- `completed` events published ($4 true) and their globally limited queues woken, as in
-- job_claim_batch (which says why `state` is left out, and what a NULL $3 means).
WITH done AS (
    UPDATE job
       SET state = 'completed', finalized_at = now(), result = r.result,
           lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
      FROM unnest($1::bigint[], $2::uuid[], $3::jsonb[]) AS r(id, token, result)
     WHERE job.id = ANY ($1::bigint[]) AND job.id = r.id AND job.lease_token = r.token
    RETURNING job.id, job.kind, job.queue, job.attempt
), notified AS (
    -- Concatenated as in job_claim_batch, which says why.
    SELECT pg_notify('pm_job_events', '[' || string_agg(
               '{"e":"completed","id":' || n.id || ',"k":"' || n.kind || '","q":"' || n.queue
               || '","a":' || n.attempt || '}', ',') || ']')
      FROM (SELECT d.*, (row_number() OVER () - 1) / 25 AS chunk FROM done AS d) AS n
     WHERE $4::boolean
     GROUP BY n.chunk
), woken AS (
    -- As in job_claim_batch.
    SELECT pg_notify('pm_job_available', q.name)
      FROM job_queue AS q
     WHERE q.concurrency_max IS NOT NULL AND q.name IN (SELECT d.queue FROM done AS d)
)
SELECT d.id FROM done AS d WHERE (SELECT count(*) FROM notified) >= 0 AND (SELECT count(*) FROM woken) >= 0

-- name: job_complete_fenced
-- The fenced completion, run inside the handler's own transaction: no row means the lease is lost.
UPDATE job
   SET state = 'completed', finalized_at = now(), result = $3,
       lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
 WHERE id = $1 AND lease_token = $2 AND state = 'running'
RETURNING id

-- name: job_lease_check
-- Fails a fenced transaction early when the lease is gone already. It takes no lock (a lock would
-- block heartbeats); the fenced UPDATE at the end of the block is what guarantees the fencing.
SELECT id FROM job WHERE id = $1 AND lease_token = $2 AND state = 'running'

-- name: job_fail_many
-- Records failed (or snoozed) attempts: each job goes to the state the worker decided (retryable,
-- dead, cancelled, scheduled or available), to run again $4[i] ms from now, keeping the error
-- history (the last 20) and the last error. $6[i] says whether the attempt counts (a snooze does not).
UPDATE job
   SET state = r.state,
       run_at = CASE WHEN r.delay_ms IS NULL THEN job.run_at
                     ELSE now() + make_interval(secs => r.delay_ms / 1000.0) END,
       attempt = CASE WHEN r.spent THEN job.attempt ELSE greatest(job.attempt - 1, 0) END,
       last_error = coalesce(r.error, job.last_error),
       errors = CASE WHEN r.error IS NULL THEN job.errors
                     WHEN jsonb_array_length(job.errors) >= 20 THEN (job.errors - 0) || jsonb_build_array(r.error)
                     ELSE job.errors || jsonb_build_array(r.error) END,
       finalized_at = CASE WHEN r.state IN ('dead', 'cancelled') THEN now() END,
       lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
  FROM unnest($1::bigint[], $2::uuid[], $3::job_state[], $4::bigint[], $5::jsonb[], $6::boolean[])
       AS r(id, token, state, delay_ms, error, spent)
 WHERE job.id = ANY ($1::bigint[]) AND job.id = r.id AND job.lease_token = r.token
RETURNING job.id, job.queue, job.kind, job.state, job.attempt

-- name: job_heartbeat_many
-- Extends the leases still held; returns them with the cancel flag (a job missing lost its lease).
UPDATE job
   SET lease_expires_at = now() + make_interval(secs => $3::bigint / 1000.0)
  FROM unnest($1::bigint[], $2::uuid[]) AS r(id, token)
 WHERE job.id = ANY ($1::bigint[]) AND job.id = r.id AND job.lease_token = r.token
RETURNING job.id, job.lease_token, job.cancel_requested

-- name: job_release_many
-- Gives jobs back at shutdown: available at once, the attempt not spent. A job whose row is locked
-- (a shared settlement transaction still open on it) is skipped, not waited for: the shutdown must
-- keep to its timeout, and the rescuer returns that job when its lease expires.
WITH free AS (
    SELECT j.id FROM job j
     WHERE j.id = ANY ($1::bigint[]) AND j.state = 'running'
       FOR UPDATE SKIP LOCKED
), released AS (
    UPDATE job
       SET state = 'available', run_at = now(), attempt = greatest(job.attempt - 1, 0),
           lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
      FROM unnest($1::bigint[], $2::uuid[]) AS r(id, token)
     WHERE job.id = ANY (ARRAY(SELECT free.id FROM free)) AND job.id = r.id AND job.lease_token = r.token
       AND job.state = 'running'
    RETURNING job.id, job.queue
), skipped AS (
    -- Still held under the token but locked by another transaction: worth another try.
    SELECT j.id FROM job AS j JOIN unnest($1::bigint[], $2::uuid[]) AS r(id, token) ON j.id = r.id
     WHERE j.lease_token = r.token AND j.state = 'running' AND j.id <> ALL (ARRAY(SELECT free.id FROM free))
)
SELECT r.id, true AS released, pg_notify('pm_job_available', r.queue) FROM released AS r
UNION ALL
SELECT s.id, false, NULL FROM skipped AS s

-- name: job_progress_set
UPDATE job SET progress = $3
 WHERE id = $1 AND lease_token = $2 AND state = 'running'
RETURNING id

-- name: job_rescue_expired
-- Returns jobs whose lease expired before $1 to available (the attempt not spent), or makes them
-- dead once they were rescued $2 times already; at most $3 per call.
WITH expired AS (
    SELECT id FROM job
     WHERE state = 'running' AND lease_expires_at < coalesce($1::timestamptz, now())
     ORDER BY lease_expires_at
     LIMIT $3
       FOR UPDATE SKIP LOCKED
), rescued AS (
    UPDATE job
       SET state = CASE WHEN job.cancel_requested THEN 'cancelled'::job_state
                        WHEN job.stalled_count >= $2 THEN 'dead'::job_state ELSE 'available'::job_state END,
           stalled_count = job.stalled_count + 1,
           attempt = greatest(job.attempt - 1, 0),
           run_at = now(),
           finalized_at = CASE WHEN job.cancel_requested OR job.stalled_count >= $2 THEN now() END,
           last_error = jsonb_build_object(
               'error', 'lease of ' || job.lease_owner || ' expired', 'type', 'Stalled',
               'attempt', job.attempt, 'at', now()),
           errors = (CASE WHEN jsonb_array_length(job.errors) >= 20 THEN job.errors - 0 ELSE job.errors END)
                    || jsonb_build_array(jsonb_build_object(
                        'error', 'lease of ' || job.lease_owner || ' expired', 'type', 'Stalled',
                        'attempt', job.attempt, 'at', now())),
           lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
      FROM expired
     WHERE job.id = expired.id
    RETURNING job.id, job.queue, job.kind, job.state, job.attempt, job.last_error
)
SELECT r.id, r.queue, r.kind, r.state, r.attempt, r.last_error,
       CASE WHEN r.state = 'available' THEN pg_notify('pm_job_available', r.queue) END AS notified
  FROM rescued AS r

-- name: job_finished_queues
-- The queues that hold finished jobs, with how many completed jobs each holds and when the oldest
-- finished. Completed jobs are not indexed by queue (0115), so this reads the table once per prune
-- run rather than making every completion write an index entry; the figures let the pruner skip
-- the reads of a queue that no rule can prune.
SELECT queue, count(*) FILTER (WHERE state = 'completed') AS completed,
       min(finalized_at) FILTER (WHERE state = 'completed') AS completed_oldest
  FROM job WHERE state IN ('completed', 'dead', 'cancelled')
 GROUP BY queue

-- name: job_completed_kept_oldest
-- The oldest of the newest $2 (>= 1) completed jobs of queue $1, by finish time then id: retention
-- by count deletes the completed jobs before it.
SELECT finalized_at, id FROM job
 WHERE queue = $1 AND state = 'completed'
 ORDER BY finalized_at DESC, id DESC
OFFSET $2 - 1
 LIMIT 1

-- name: job_prune_completed
-- Deletes up to $5 completed jobs of queue $1 with an id above $2 that finished before ($3, $4)
-- (finish time, id), or all of them when $3 is NULL. The rows are picked in id order along the
-- primary key, without a lock (as job_prune_older), and the caller goes on after the last one
-- picked: each batch starts where the last stopped instead of walking the rows it just deleted.
WITH doomed AS MATERIALIZED (
    SELECT id FROM job
     WHERE id > $2 AND queue = $1 AND state = 'completed'
       AND ($3::timestamptz IS NULL OR (finalized_at, id) < ($3::timestamptz, $4::bigint))
       AND (parent_id IS NULL OR NOT EXISTS (
            SELECT 1 FROM job AS p WHERE p.id = job.parent_id
               AND p.state NOT IN ('completed', 'dead', 'cancelled')))
     ORDER BY id
     LIMIT $5
), deleted AS (
    DELETE FROM job USING doomed
     WHERE job.id = doomed.id AND job.state = 'completed' RETURNING 1
)
SELECT (SELECT count(*) FROM deleted) AS deleted, (SELECT count(*) FROM doomed) AS picked,
       (SELECT max(id) FROM doomed) AS last_id

-- name: job_prune_older
-- Deletes up to $4 dead or cancelled jobs of queue $1 in states $2 finished before $3
-- (job_failed_idx). The rows are picked without a lock: a row lock is a WAL record of its own for
-- each pruned job, and the DELETE re-checks the state of a row changed meanwhile (an admin's
-- retry) anyway.
WITH doomed AS MATERIALIZED (
    SELECT id FROM job
     WHERE queue = $1 AND state = ANY($2::job_state[]) AND finalized_at < $3
       AND state IN ('dead', 'cancelled')
       AND (parent_id IS NULL OR NOT EXISTS (
            SELECT 1 FROM job AS p WHERE p.id = job.parent_id
               AND p.state NOT IN ('completed', 'dead', 'cancelled')))
     LIMIT $4
), deleted AS (
    DELETE FROM job USING doomed
     WHERE job.id = doomed.id AND job.state = ANY($2::job_state[]) RETURNING 1
)
SELECT count(*) FROM deleted

-- name: job_prune_beyond_count
-- Deletes up to $4 dead or cancelled jobs of queue $1 in states $2 beyond the newest $3
-- (job_failed_idx).
WITH doomed AS (
    SELECT id FROM job
     WHERE queue = $1 AND state = ANY($2::job_state[]) AND state IN ('dead', 'cancelled')
       AND (parent_id IS NULL OR NOT EXISTS (
            SELECT 1 FROM job AS p WHERE p.id = job.parent_id
               AND p.state NOT IN ('completed', 'dead', 'cancelled')))
     ORDER BY finalized_at DESC
    OFFSET $3
     LIMIT $4
), deleted AS (
    DELETE FROM job USING doomed
     WHERE job.id = doomed.id AND job.state = ANY($2::job_state[]) RETURNING 1
)
SELECT count(*) FROM deleted

-- name: job_get
SELECT * FROM job WHERE id = $1

-- name: job_children_results
SELECT id, kind, state, result FROM job WHERE parent_id = $1 ORDER BY id

-- name: job_list
-- Lists jobs, newest first, filtered by the non-NULL arguments; keyset pagination by id.
SELECT id, queue, kind, state, priority, attempt, max_attempts, run_at, created_at, finalized_at,
       last_error, progress, unique_key, parent_id
  FROM job
 WHERE ($1::job_state IS NULL OR state = $1)
   AND ($2::text IS NULL OR queue = $2)
   AND ($3::text IS NULL OR kind = $3)
   AND ($4::bigint IS NULL OR id < $4)
   AND ($6::jsonb IS NULL OR payload @> $6)
 ORDER BY id DESC
 LIMIT $5

-- name: job_retry
-- Makes one job available now: a dead, cancelled, retryable or scheduled one. A dead or cancelled
-- job starts over with fresh attempts; its error history is kept. A finished job whose unique key
-- an unfinished job holds now (enqueued again since it died) is left as it is: its work is queued.
-- A flow parent with unfinished children waits for them again (job_replay_dead does the same).
UPDATE job
   SET state = CASE WHEN EXISTS (SELECT 1 FROM job AS c WHERE c.parent_id = job.id
                                   AND c.state NOT IN ('completed', 'dead', 'cancelled'))
                    THEN 'waiting_children'::job_state ELSE 'available'::job_state END,
       pending_children = (SELECT count(*) FROM job AS c WHERE c.parent_id = job.id
                              AND c.state NOT IN ('completed', 'dead', 'cancelled')),
       run_at = now(), finalized_at = NULL, cancel_requested = false,
       attempt = CASE WHEN state IN ('dead', 'cancelled') THEN 0 ELSE attempt END,
       stalled_count = CASE WHEN state IN ('dead', 'cancelled') THEN 0 ELSE stalled_count END
 WHERE id = $1 AND state IN ('dead', 'cancelled', 'retryable', 'scheduled')
   AND (unique_key IS NULL OR state IN ('retryable', 'scheduled') OR NOT EXISTS (
        SELECT 1 FROM job AS live
         WHERE live.unique_key = job.unique_key AND live.state NOT IN ('completed', 'dead', 'cancelled')))
RETURNING id, queue, pg_notify('pm_job_available', queue)

-- name: job_replay_dead
-- Replays up to $6 dead jobs matching every non-NULL filter: kind, queue, an error substring, a
-- window on finalized_at. Of dead jobs sharing a unique key only the newest comes back, and none
-- whose key an unfinished job holds now (enqueued again since it died): two live jobs cannot share
-- a key, and one such job must not make the whole replay fail.
WITH candidate AS (
    SELECT id, unique_key FROM job
     WHERE state = 'dead'
       AND ($1::text IS NULL OR kind = $1)
       AND ($2::text IS NULL OR queue = $2)
       AND ($3::text IS NULL OR strpos(coalesce(last_error ->> 'error', ''), $3) > 0)
       AND ($4::timestamptz IS NULL OR finalized_at >= $4)
       AND ($5::timestamptz IS NULL OR finalized_at < $5)
       AND (unique_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM job AS live
             WHERE live.unique_key = job.unique_key
               AND live.state NOT IN ('completed', 'dead', 'cancelled')))
     ORDER BY id
     LIMIT $6
       FOR UPDATE SKIP LOCKED
), chosen AS (
    SELECT DISTINCT ON (coalesce(unique_key, id::text)) id
      FROM candidate
     ORDER BY coalesce(unique_key, id::text), id DESC
), replayed AS (
    -- A parent waits for its unfinished children, and for children replayed with it (which the
    -- job_child_moved trigger counts in as the statement ends; pending_children counts the others).
    UPDATE job
       SET state = CASE WHEN EXISTS (SELECT 1 FROM job AS c WHERE c.parent_id = job.id
                                       AND (c.state NOT IN ('completed', 'dead', 'cancelled')
                                            OR c.id IN (SELECT chosen.id FROM chosen)))
                        THEN 'waiting_children'::job_state ELSE 'available'::job_state END,
           pending_children = (SELECT count(*) FROM job AS c WHERE c.parent_id = job.id
                                  AND c.state NOT IN ('completed', 'dead', 'cancelled')),
           run_at = now(), finalized_at = NULL, attempt = 0, stalled_count = 0,
           cancel_requested = false
      FROM chosen WHERE job.id = chosen.id
    RETURNING job.id, job.queue
)
SELECT r.id, r.queue, pg_notify('pm_job_available', r.queue) FROM replayed AS r

-- name: job_cancel
-- Cancels a job that has not started; a running job is asked to stop (its handler sees it).
WITH target AS (
    SELECT id, state FROM job WHERE id = $1 FOR UPDATE
), cancelled AS (
    UPDATE job
       SET state = CASE WHEN target.state = 'running' THEN job.state ELSE 'cancelled'::job_state END,
           finalized_at = CASE WHEN target.state = 'running' THEN NULL ELSE now() END,
           cancel_requested = true
      FROM target
     WHERE job.id = target.id
       AND target.state IN ('scheduled', 'available', 'retryable', 'waiting_children', 'running')
    RETURNING job.id, job.state
)
SELECT c.id, c.state, pg_notify('pm_job_cancel', c.id::text) FROM cancelled AS c

-- name: job_queue_set_paused
INSERT INTO job_queue (name, paused) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET paused = EXCLUDED.paused, updated_at = now()
RETURNING name, pg_notify('pm_job_available', name)

-- name: job_queue_set_waiting_events
-- Whether queue $1 publishes `waiting` events ($2).
INSERT INTO job_queue (name, waiting_events) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET waiting_events = EXCLUDED.waiting_events, updated_at = now()

-- name: job_queue_set_max_depth
INSERT INTO job_queue (name, max_depth) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET max_depth = EXCLUDED.max_depth, updated_at = now()

-- name: job_queue_list
SELECT name, paused, max_depth, rate_max, rate_window_ms, concurrency_max, waiting_events,
       CASE WHEN rate_paused_until > now() THEN rate_paused_until END AS rate_paused_until
  FROM job_queue ORDER BY name

-- name: job_claim_limited
-- The claim of a queue with limits (migrations 0110 and 0617 say how): $1 queue, $2 wanted, $3 owner,
-- $4 lease ms, $5 quick commit; first it completes jobs $6[i] held under lease tokens $7[i] with
-- results $8[i] ($8 NULL: none), publishing their events ($9) or deleting their rows ($10). Rows as
-- job_claim's; a row with `claimed` false is a completed job's id, or carries retry_after_ms when
-- the queue may start nothing more before then.
SELECT * FROM job_claim_limited($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)

-- name: job_queue_limits
-- The limits of queues $1 that have any: a rate, a global concurrency, or a pause still running
-- (paused_ms, from the server's clock).
SELECT name, rate_max, rate_window_ms, concurrency_max,
       CASE WHEN rate_paused_until > now()
            THEN ceil(extract(epoch FROM rate_paused_until - now()) * 1000)::bigint END AS paused_ms
  FROM job_queue
 WHERE name = ANY ($1::text[])
   AND (rate_max IS NOT NULL OR concurrency_max IS NOT NULL OR rate_paused_until > now())

-- name: job_queue_set_rate_limit
-- At most $2 jobs of queue $1 started per window of $3 ms ($2 NULL: no rate limit); the count
-- starts again. Tells the workers (pm_job_queue), which claim the queue by the limited path.
INSERT INTO job_queue (name, rate_max, rate_window_ms) VALUES ($1, $2, $3)
ON CONFLICT (name) DO UPDATE
   SET rate_max = EXCLUDED.rate_max, rate_window_ms = EXCLUDED.rate_window_ms,
       rate_window = NULL, rate_count = 0, updated_at = now()
RETURNING name, pg_notify('pm_job_queue', name)

-- name: job_queue_set_concurrency
-- At most $2 jobs of queue $1 running at once over every process ($2 NULL: no such limit).
INSERT INTO job_queue (name, concurrency_max) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET concurrency_max = EXCLUDED.concurrency_max, updated_at = now()
RETURNING name, pg_notify('pm_job_queue', name)

-- name: job_queue_pause_for
-- No job of queue $1 starts for the next $2 ms (a handler's RateLimitedError); a longer pause
-- already running is kept. Returns how long the queue is paused from now.
INSERT INTO job_queue (name, rate_paused_until) VALUES ($1, now() + make_interval(secs => $2::bigint / 1000.0))
ON CONFLICT (name) DO UPDATE
   SET rate_paused_until = greatest(job_queue.rate_paused_until, EXCLUDED.rate_paused_until),
       updated_at = now()
RETURNING ceil(extract(epoch FROM rate_paused_until - now()) * 1000)::bigint AS paused_ms,
          pg_notify('pm_job_queue', name)

-- name: job_queue_wake
-- Wakes the workers of queues $1 (a job of a queue with a global concurrency finished: a slot is free).
-- Commits without waiting for its WAL flush: a wake lost in a crash of the server is covered by the
-- workers' poll, and nothing durable depends on it.
SELECT pg_notify('pm_job_available', q), set_config('synchronous_commit', 'off', true)
  FROM unnest($1::text[]) AS q

-- name: job_stats
SELECT queue, state, count(*) AS n FROM job GROUP BY queue, state ORDER BY queue, state

-- name: job_oldest_available
-- Per queue, how long its oldest available job has been due (seconds), by the available jobs' index.
SELECT queue, extract(epoch FROM now() - min(run_at))::float8 AS age_s
  FROM job WHERE state = 'available' GROUP BY queue ORDER BY queue

-- name: job_periodic_claim_slot
-- Records that schedule $1's slot $2 is enqueued; no row means another process did it already.
INSERT INTO job_periodic (name, last_slot) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET last_slot = EXCLUDED.last_slot, updated_at = now()
 WHERE job_periodic.last_slot < EXCLUDED.last_slot
RETURNING name

-- name: job_periodic_last_slot
SELECT last_slot FROM job_periodic WHERE name = $1

-- name: job_state_enum
SELECT unnest(enum_range(NULL::job_state))::text AS state

-- name: job_events_publish
SELECT pg_notify($1, $2)

-- name: job_listener_ping
SELECT 1

-- name: job_session_generic_plans
-- For the worker's pinned connections (claims and completions) and its LISTEN connection (an idle
-- worker's claims), which run the same few statements
-- thousands of times a second: with small batches (an idle worker's one-job claims) PostgreSQL kept
-- choosing custom plans and planned the claim statement again on every call, a large share of its
-- backend's CPU. The generic plans are the good ones (an index scan of the available jobs, updates
-- by primary key; docs/BENCHMARKS.md, "Figures behind the job engine's code"). A generic plan is made
-- once, with the table's statistics of that moment: made while the table is small (a new
-- deployment, a quiet hour after pruning) it scans the whole table or a bitmap for `id = ANY(...)`,
-- and keeps doing so as the table grows, on every claim. Sequential and bitmap
-- scans are turned off for these sessions so that every plan goes by index, whatever the table's
-- size when it was made (each of their statements reads rows by primary key or by a partial index).
-- job_session_default_plans undoes it all before the connection goes back to the pool (whose reset
-- keeps session settings).
SELECT set_config('plan_cache_mode', 'force_generic_plan', false),
       set_config('enable_seqscan', 'off', false),
       set_config('enable_bitmapscan', 'off', false)

-- name: job_session_default_plans
SELECT set_config(name, reset_val, false) FROM pg_settings
 WHERE name IN ('plan_cache_mode', 'enable_seqscan', 'enable_bitmapscan', 'lock_timeout')

-- name: job_session_lock_timeout
-- The claim sessions' longest wait on a lock ($1 ms; WorkerOptions.claim_lock_timeout_ms), undone
-- with the plans by job_session_default_plans.
SELECT set_config('lock_timeout', $1::integer || 'ms', false)

-- name: job_periodic_init
-- The first sight of a schedule records its current slot without enqueuing (the first run is at the
-- next slot); no row means the schedule is known already.
INSERT INTO job_periodic (name, last_slot) VALUES ($1, $2)
ON CONFLICT (name) DO NOTHING
RETURNING name

-- name: job_leader_try_lock
SELECT pg_try_advisory_lock($1)

-- name: job_leader_unlock
SELECT pg_advisory_unlock($1)

-- name: job_vacuum
-- Run by the maintenance leader between autovacuum's passes (autovacuum wakes once a minute at best,
-- which at thousands of jobs a second leaves millions of dead tuples): space freed by claims,
-- completions and pruning is reused at once, so the table stops growing.
VACUUM (ANALYZE) job

-- name: job_hold_leases_many
-- Locks, in id order, the running jobs of $1 still held under the lease tokens $2 (batch.py): a job
-- returned cannot lose its lease before the caller's transaction ends (the rescuer skips locked rows;
-- a heartbeat or a cancel waits). A job missing lost its lease. Only a running job holds a lease token
-- (CHECK job_lease_iff_running), so `state` is left out, as job_claim_batch explains.
SELECT job.id, job.lease_token
  FROM job
  JOIN unnest($1::bigint[], $2::uuid[]) AS r(id, token) ON job.id = r.id
 WHERE job.id = ANY ($1::bigint[]) AND job.lease_token = r.token
 ORDER BY job.id
   FOR UPDATE OF job

-- name: job_change
-- Changes a job that has not started (docs/state_machines.md, "Changing a waiting job"): payload $2,
-- priority $3 (NULL keeps each), and a delay of $4 ms from now (NULL keeps run_at; not for a flow
-- parent still waiting for its children, whose run_at its last child sets). A job being claimed
-- right now is waited for, then found running and left alone (no row).
UPDATE job
   SET payload = coalesce($2, payload),
       priority = coalesce($3, priority),
       run_at = CASE WHEN $4::bigint IS NULL THEN run_at ELSE now() + make_interval(secs => $4::bigint / 1000.0) END,
       state = CASE WHEN $4::bigint IS NULL OR state IN ('retryable', 'waiting_children') THEN state
                    WHEN $4::bigint > 0 THEN 'scheduled'::job_state ELSE 'available'::job_state END
 WHERE id = $1 AND state IN ('scheduled', 'available', 'retryable', 'waiting_children')
   AND ($4::bigint IS NULL OR state <> 'waiting_children')
RETURNING id, state, CASE WHEN state = 'available' THEN pg_notify('pm_job_available', queue) END AS notified

-- name: job_promote
-- Makes a scheduled (delayed) or retryable job available now, its attempts unchanged.
UPDATE job SET state = 'available', run_at = now()
 WHERE id = $1 AND state IN ('scheduled', 'retryable')
RETURNING id, pg_notify('pm_job_available', queue) AS notified

-- name: job_cancel_children_in_queue
-- Before removing jobs of queue $1 in states $2: those that are flow children become cancelled
-- (leases dropped), so each parent follows its failure policy instead of waiting for ever.
UPDATE job
   SET state = 'cancelled', finalized_at = now(), cancel_requested = true,
       lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
 WHERE queue = $1 AND state = ANY ($2::job_state[]) AND parent_id IS NOT NULL
RETURNING id

-- name: job_delete_in_queue
-- Deletes up to $4 jobs of queue $1 in states $2 or with ids $3; returns how many.
WITH doomed AS (
    SELECT id FROM job
     WHERE queue = $1 AND (state = ANY ($2::job_state[]) OR id = ANY ($3::bigint[]))
     LIMIT $4
       FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM job USING doomed WHERE job.id = doomed.id RETURNING 1
)
SELECT count(*) FROM deleted

-- name: job_queue_delete
DELETE FROM job_queue WHERE name = $1

-- name: job_count_running_in_queue
SELECT count(*) FROM job WHERE queue = $1 AND state = 'running'

-- name: job_remove
-- Removes one job that is not running; a flow child that had not finished is cancelled first
-- (job_cancel_one_child), so its parent follows its failure policy. Returns its kind and queue.
DELETE FROM job WHERE id = $1 AND state <> 'running' RETURNING id, kind, queue

-- name: job_cancel_one_child
UPDATE job SET state = 'cancelled', finalized_at = now(), cancel_requested = true
 WHERE id = $1 AND parent_id IS NOT NULL
   AND state IN ('scheduled', 'available', 'retryable', 'waiting_children')

-- name: job_log_append
-- Appends line $3 to the logs of job $1 held under lease token $2, keeping the newest $4 lines.
UPDATE job
   SET logs = (CASE WHEN jsonb_array_length(coalesce(logs, '[]'::jsonb)) >= $4
                    THEN coalesce(logs, '[]'::jsonb) - 0 ELSE coalesce(logs, '[]'::jsonb) END)
              || jsonb_build_array(jsonb_build_object('at', now(), 'line', $3::text))
 WHERE id = $1 AND lease_token = $2
RETURNING id

-- name: job_children_failures
-- A flow parent's children that are dead or cancelled, with their last errors.
SELECT id, kind, state, last_error FROM job
 WHERE parent_id = $1 AND state IN ('dead', 'cancelled') ORDER BY id

-- name: job_outcome
-- A job's state, result and last error (wait_until_finished).
SELECT state, result, last_error FROM job WHERE id = $1

-- name: job_codec_check
-- What a jsonb value comes back as: a dict with the engine's codecs, text without them.
SELECT '{}'::jsonb AS value
