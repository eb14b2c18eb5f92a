-- The claim of a limited queue on its own, job_claim_limited_take, so that a worker's batch claim can
-- take a limited queue's jobs in its own statement and commit (jobs.sql, job_claim_batch_limited).
-- Claimed by a statement of their own, a globally limited queue's jobs, which free their slots one at
-- a time, cost a statement, a commit and a WAL flush for every few of them, where a plain queue's
-- batch shares one among a hundred; the plain queues beside them paid for it (docs/BENCHMARKS.md,
-- "A limited queue beside a plain one").
--
-- $6 (p_done_queues): the queues of the jobs the caller's statement completed just before, whose
-- freed slots this claim takes (it wakes the other processes only for a slot it left free, as
-- 0617). $7 (p_wait) false: the queue's row is taken with SKIP LOCKED, so a batch claim never waits
-- for another process's claim of the queue; a row held returns one row with `claimed` false, the
-- queue, and neither id nor retry_after_ms (the caller tries the queue again with its next claim).
-- The count of running jobs follows the lock in a statement of its own, whose snapshot sees every
-- claim committed before the lock was granted (a batch's own snapshot, older, would not).
-- job_claim_limited is 0618's completions, then this claim with p_wait true.
CREATE FUNCTION job_claim_limited_take(p_queue text, p_wanted integer, p_owner text, p_lease_ms bigint,
                                       p_quick boolean, p_done_queues text[], p_wait boolean)
RETURNS TABLE (claimed boolean, id bigint, queue text, kind text, payload jsonb, priority integer,
               attempt integer, max_attempts integer, backoff jsonb, timeout_ms integer,
               lease_token uuid, parent_id bigint, cancel_requested boolean, retry_after_ms bigint,
               waited_s float8)
LANGUAGE plpgsql
-- Generic plans, by index: the statements below run on whichever pooled session calls the function,
-- thousands of times a second, and PostgreSQL kept planning some again per call (custom plans); a
-- generic plan made while the table is small would scan it whole for ever, hence no sequential or
-- bitmap scans (jobs.sql, job_session_generic_plans, says the same of the worker's own sessions).
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
#variable_conflict use_column
DECLARE
    q job_queue%ROWTYPE;
    t timestamptz;
    t_ms numeric;
    win bigint;
    started integer := 0;
    allowed integer := p_wanted;
    running integer;
    got integer := 0;
BEGIN
    -- No row: the queue has no settings, so no limits (its fields read as NULL below).
    IF p_wait THEN
        SELECT * INTO q FROM job_queue AS jq WHERE jq.name = p_queue FOR UPDATE;
    ELSE
        -- Beside a batch claim: the batch's plain claims must not wait for another process's claim
        -- of this queue. The queue is taken at this worker's next claim.
        SELECT * INTO q FROM job_queue AS jq WHERE jq.name = p_queue FOR UPDATE SKIP LOCKED;
        IF NOT FOUND AND EXISTS (SELECT 1 FROM job_queue AS jq WHERE jq.name = p_queue) THEN
            RETURN QUERY SELECT false, NULL::bigint, p_queue, NULL::text, NULL::jsonb, NULL::integer,
                                NULL::integer, NULL::integer, NULL::jsonb, NULL::integer, NULL::uuid,
                                NULL::bigint, NULL::boolean, NULL::bigint, NULL::float8;
            RETURN;
        END IF;
    END IF;
    IF q.paused THEN
        RETURN;
    END IF;
    t := clock_timestamp();
    t_ms := extract(epoch FROM t) * 1000;
    IF q.rate_paused_until > t THEN
        RETURN QUERY SELECT false, NULL::bigint, p_queue, NULL::text, NULL::jsonb, NULL::integer,
                            NULL::integer, NULL::integer, NULL::jsonb, NULL::integer, NULL::uuid,
                            NULL::bigint, NULL::boolean,
                            ceil(extract(epoch FROM q.rate_paused_until - t) * 1000)::bigint, NULL::float8;
        RETURN;
    END IF;
    IF q.rate_max IS NOT NULL THEN
        win := floor(t_ms / q.rate_window_ms)::bigint;
        -- A clock stepped back keeps counting into the window already open.
        IF q.rate_window >= win THEN
            win := q.rate_window;
            started := q.rate_count;
        END IF;
        allowed := least(allowed, q.rate_max - started);
    END IF;
    -- A spent rate window starts nothing: no count, and so no wake below (running stays NULL).
    IF q.concurrency_max IS NOT NULL AND allowed > 0 THEN
        SELECT count(*) INTO running
          FROM (SELECT 1 FROM job AS j WHERE j.state = 'running' AND j.queue = p_queue
                 LIMIT q.concurrency_max) AS r;
        allowed := least(allowed, q.concurrency_max - running);
    END IF;
    IF allowed > 0 THEN
        RETURN QUERY
        WITH picked AS (
            SELECT j.id FROM job AS j
             WHERE j.state = 'available' AND j.queue = p_queue
             ORDER BY j.priority, j.run_at, j.id
             LIMIT allowed
               FOR UPDATE SKIP LOCKED
        ), claimed AS (
            UPDATE job
               SET state = 'running',
                   attempt = job.attempt + 1,
                   attempted_at = t,
                   lease_owner = p_owner,
                   lease_token = gen_random_uuid(),
                   lease_expires_at = t + p_lease_ms * interval '1 millisecond'
             WHERE job.id = ANY (ARRAY(SELECT picked.id FROM picked))
            RETURNING job.id, job.queue, job.kind, job.payload, job.priority, job.attempt, job.max_attempts,
                      job.backoff, job.timeout_ms, job.lease_token, job.parent_id, job.cancel_requested,
                      date_part('epoch', t - job.run_at) AS waited_s
        )
        SELECT true, c.id, c.queue::text, c.kind::text, c.payload::jsonb, c.priority::integer,
               c.attempt::integer, c.max_attempts::integer, c.backoff, c.timeout_ms::integer,
               c.lease_token, c.parent_id, c.cancel_requested, NULL::bigint, c.waited_s
          FROM claimed AS c;
        GET DIAGNOSTICS got = ROW_COUNT;
        IF p_quick AND got > 0 THEN
            PERFORM set_config('synchronous_commit', 'off', true);
        END IF;
    END IF;
    IF q.concurrency_max IS NOT NULL AND p_queue = ANY (p_done_queues) AND running + got < q.concurrency_max THEN
        -- This queue's jobs completed here and the claim left a slot free: another process may take it.
        PERFORM pg_notify('pm_job_available', p_queue);
    END IF;
    IF q.rate_max IS NOT NULL THEN
        IF got > 0 THEN
            UPDATE job_queue AS jq SET rate_window = win, rate_count = started + got WHERE jq.name = p_queue;
        END IF;
        IF started + got >= q.rate_max THEN
            -- The window is spent: nothing more starts before the next one opens.
            RETURN QUERY SELECT false, NULL::bigint, p_queue, NULL::text, NULL::jsonb, NULL::integer,
                                NULL::integer, NULL::integer, NULL::jsonb, NULL::integer, NULL::uuid,
                                NULL::bigint, NULL::boolean,
                                greatest(1, ceil((win + 1) * q.rate_window_ms - t_ms))::bigint, NULL::float8;
        END IF;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION job_claim_limited(p_queue text, p_wanted integer, p_owner text, p_lease_ms bigint,
                                  p_quick boolean, p_ids bigint[] DEFAULT '{}',
                                  p_tokens uuid[] DEFAULT '{}', p_results jsonb[] DEFAULT NULL,
                                  p_notify boolean DEFAULT false, p_delete boolean DEFAULT false)
RETURNS TABLE (claimed boolean, id bigint, queue text, kind text, payload jsonb, priority integer,
               attempt integer, max_attempts integer, backoff jsonb, timeout_ms integer,
               lease_token uuid, parent_id bigint, cancel_requested boolean, retry_after_ms bigint,
               waited_s float8)
LANGUAGE plpgsql
-- Generic plans, by index: the statements below run on whichever pooled session calls the function,
-- thousands of times a second, and PostgreSQL kept planning some again per call (custom plans); a
-- generic plan made while the table is small would scan it whole for ever, hence no sequential or
-- bitmap scans (jobs.sql, job_session_generic_plans, says the same of the worker's own sessions).
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
#variable_conflict use_column
DECLARE
    done_ids bigint[] := '{}';
    done_queues text[] := '{}';
    done_events text[] := '{}';
BEGIN
    IF cardinality(p_ids) > 0 THEN
        -- One statement for both forms: the one $10 does not ask for is cut by its one-time filter.
        WITH deleted AS (
            DELETE FROM job
             USING unnest(p_ids, p_tokens, p_results) AS r(id, token, result)
             WHERE p_delete AND job.id = ANY (p_ids) AND job.id = r.id AND job.lease_token = r.token
            RETURNING job.id, job.kind, job.queue, job.attempt
        ), updated AS (
            UPDATE job
               SET state = 'completed', finalized_at = now(), result = r.result,
                   lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
              FROM unnest(p_ids, p_tokens, p_results) AS r(id, token, result)
             WHERE NOT p_delete AND job.id = ANY (p_ids) AND job.id = r.id AND job.lease_token = r.token
            RETURNING job.id, job.kind, job.queue, job.attempt
        ), done AS (
            SELECT * FROM deleted UNION ALL SELECT * FROM updated
        )
        SELECT coalesce(array_agg(d.id), '{}'), coalesce(array_agg(DISTINCT d.queue::text), '{}'),
               coalesce(array_agg('{"e":"completed","id":' || d.id || ',"k":"' || d.kind || '","q":"'
                                  || d.queue || '","a":' || d.attempt || '}'), '{}')
          INTO done_ids, done_queues, done_events
          FROM done AS d;
        IF p_notify THEN
            PERFORM pg_notify('pm_job_events', '[' || array_to_string(done_events[i:i + 24], ',') || ']')
               FROM generate_series(1, cardinality(done_events), 25) AS i;
        END IF;
        IF done_queues <> ARRAY[p_queue] THEN
            PERFORM pg_notify('pm_job_available', jq.name)
               FROM job_queue AS jq
              WHERE jq.concurrency_max IS NOT NULL AND jq.name = ANY (done_queues) AND jq.name <> p_queue;
        END IF;
        RETURN QUERY SELECT false, d.id, NULL::text, NULL::text, NULL::jsonb, NULL::integer,
                            NULL::integer, NULL::integer, NULL::jsonb, NULL::integer, NULL::uuid,
                            NULL::bigint, NULL::boolean, NULL::bigint, NULL::float8
                       FROM unnest(done_ids) AS d(id);
    END IF;
    RETURN QUERY SELECT * FROM job_claim_limited_take(p_queue, p_wanted, p_owner, p_lease_ms, p_quick,
                                                      done_queues, true);
END
$$;
