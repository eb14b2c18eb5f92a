-- The operator's view: query gauges of the PSP step, the webhooks and the sessions, the queues'
-- throughput, and the rows of an intent's timeline.

-- name: psp_manual_review
-- Per PSP, the transactions waiting for a person and how long the oldest has waited (psp_tx_open_idx).
SELECT psp, count(*)::float8 AS n, extract(epoch FROM now() - min(updated_at))::float8 AS oldest_s
  FROM psp_tx WHERE state = 'MANUAL_REVIEW' AND state NOT IN ('COMPLETED', 'FAILED')
 GROUP BY psp ORDER BY psp;

-- name: psp_balance_states
SELECT psp, currency, state, extract(epoch FROM checked_at)::float8 AS checked_at
  FROM psp_balance_check ORDER BY psp, currency;

-- name: webhook_endpoints_disabled
SELECT count(*)::float8 FROM webhook_endpoint WHERE status = 'disabled';

-- name: webhook_deliveries_dead
SELECT count(*)::float8 FROM webhook_delivery WHERE status = 'dead';

-- name: checkout_sessions_by_status
SELECT status, count(*)::float8 AS n FROM checkout_session GROUP BY status ORDER BY status;

-- name: queue_throughput
-- Per queue, the jobs completed within the last $1 seconds, cluster-wide, and
-- the completed jobs the queue holds: retention keeps at most JOB_RETENTION_COMPLETED_COUNT per
-- queue, so a count that reaches it may miss pruned completions.
SELECT queue,
       count(*) FILTER (WHERE finalized_at > now() - make_interval(secs => $1::float8)) AS recent,
       count(*) AS kept
  FROM job WHERE state = 'completed'
 GROUP BY queue ORDER BY queue;

-- name: timeline_psp_tx
SELECT * FROM psp_tx WHERE intent_id = $1;

-- name: timeline_refunds
SELECT id, amount, fee_refunded, currency, status, failure_reason, created_at, finished_at
  FROM refund WHERE intent_id = $1 ORDER BY created_at;

-- name: timeline_webhooks
-- The deliveries of the events that name intent $1 (webhook_event_intent_idx).
SELECT e.id AS event_id, e.type, e.created_at, d.id AS delivery_id, d.endpoint_id, d.status, d.attempts,
       d.last_status_code, d.last_error, d.last_attempt_at, d.finished_at
  FROM webhook_event AS e
  JOIN webhook_delivery AS d ON d.event_id = e.id
 WHERE e.body LIKE '%"intent_id"%' AND (((e.body::jsonb) -> 'data' ->> 'intent_id')::uuid) = $1
 ORDER BY e.created_at, d.endpoint_id;

-- name: timeline_intent
SELECT id, status, hold_id, created_at, confirmed_at, finished_at, failure_reason FROM intent WHERE id = $1;

-- name: balance_alerts_recent
SELECT psp, currency, state, previous_state, raised_at FROM psp_balance_alert ORDER BY id DESC LIMIT $1;
