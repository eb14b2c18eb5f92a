-- Cluster-wide limits per queue (docs/state_machines.md, "Queue limits"): a rate limit (at most
-- rate_max jobs started per window of rate_window_ms), a global concurrency (at most
-- concurrency_max jobs running at once over every process), and a pause a handler asks for when its
-- partner answers 429 (rate_paused_until). They live on the queue's row so every process sees them.
--
-- A queue without limits is claimed by the worker's plain claim statements, which skip a queue whose
-- row carries a limit (as they skip a paused one): a limited queue is claimed by job_claim_limited
-- alone, so the plain path pays nothing for the feature but the columns it reads on that row.
ALTER TABLE job_queue
    ADD COLUMN rate_max integer CHECK (rate_max BETWEEN 1 AND 1000000),
    ADD COLUMN rate_window_ms integer CHECK (rate_window_ms BETWEEN 1 AND 86400000),
    -- The window rate_count counts: windows are consecutive spans of rate_window_ms from the Unix
    -- epoch, numbered from 0, so every process numbers them alike.
    ADD COLUMN rate_window bigint,
    ADD COLUMN rate_count integer NOT NULL DEFAULT 0 CHECK (rate_count >= 0),
    ADD COLUMN concurrency_max integer CHECK (concurrency_max BETWEEN 1 AND 100000),
    ADD COLUMN rate_paused_until timestamptz,
    ADD CONSTRAINT job_queue_rate_whole CHECK ((rate_max IS NULL) = (rate_window_ms IS NULL));

-- Claims up to p_wanted available jobs of a limited queue for owner p_owner with a lease of
-- p_lease_ms, within the queue's limits; with p_quick, a claim that got jobs commits without
-- waiting for its WAL flush, as the plain claims do (docs/ARCHITECTURE.md, "Claims commit quickly":
-- its row counts and its jobs are lost together). Returns the claimed jobs (`claimed` true), and, when the
-- queue may not start more jobs before some time, one row with `claimed` false whose retry_after_ms
-- says how long (the rest of the window, or of a pause). A queue full of running jobs (its global
-- concurrency) returns no such row: a slot frees when a job of the queue finishes, and the process
-- that finishes it wakes the queue's workers.
--
-- A function, not one statement: the queue's row is locked first, so the claims of a limited queue
-- are serialised over every process, and each later statement runs on a fresh snapshot that sees
-- what the previous holder committed (a single statement's snapshot is taken before it waits for
-- the lock, and would count neither the jobs nor the starts that holder has just claimed). The
-- clock is read once the lock is held, so the windows' start times follow the order of the claims;
-- the jobs' attempted_at is that time, the time the rate limit counted them at.
CREATE FUNCTION job_claim_limited(p_queue text, p_wanted integer, p_owner text, p_lease_ms bigint,
                                  p_quick boolean)
RETURNS TABLE (claimed boolean, id bigint, queue text, kind text, payload jsonb, priority integer,
               attempt integer, max_attempts integer, backoff jsonb, timeout_ms integer,
               lease_token uuid, parent_id bigint, cancel_requested boolean, retry_after_ms bigint)
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
                            ceil(extract(epoch FROM q.rate_paused_until - t) * 1000)::bigint;
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
                      job.backoff, job.timeout_ms, job.lease_token, job.parent_id, job.cancel_requested
        )
        SELECT true, c.id, c.queue::text, c.kind::text, c.payload::jsonb, c.priority::integer,
               c.attempt::integer, c.max_attempts::integer, c.backoff, c.timeout_ms::integer,
               c.lease_token, c.parent_id, c.cancel_requested, NULL::bigint
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
                                greatest(1, ceil((win + 1) * q.rate_window_ms - t_ms))::bigint;
        END IF;
    END IF;
END
$$;
