-- The claim of a limited queue reports how long each job waited since it was due (`waited_s`), as
-- the plain claims do, so paymanager_job_wait_seconds covers rate-limited and concurrency-limited
-- queues (the psp.<name> queues) too. The body is 0110's with that column added; the result type
-- changes, so the function is dropped and created again (in this migration's transaction).
DROP FUNCTION job_claim_limited(text, integer, text, bigint, boolean);

CREATE FUNCTION job_claim_limited(p_queue text, p_wanted integer, p_owner text, p_lease_ms bigint,
                                  p_quick boolean)
RETURNS TABLE (claimed boolean, id bigint, queue text, kind text, payload jsonb, priority integer,
               attempt integer, max_attempts integer, backoff jsonb, timeout_ms integer,
               lease_token uuid, parent_id bigint, cancel_requested boolean, retry_after_ms bigint,
               waited_s float8)
LANGUAGE plpgsql AS $$
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
    SELECT * INTO q FROM job_queue AS jq WHERE jq.name = p_queue FOR UPDATE;
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
                   lease_expires_at = t + make_interval(secs => p_lease_ms / 1000.0)
              FROM picked
             WHERE job.id = picked.id
            RETURNING job.id, job.queue, job.kind, job.payload, job.priority, job.attempt, job.max_attempts,
                      job.backoff, job.timeout_ms, job.lease_token, job.parent_id, job.cancel_requested,
                      extract(epoch FROM t - job.run_at)::float8 AS waited_s
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
