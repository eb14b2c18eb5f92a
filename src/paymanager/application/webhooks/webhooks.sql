-- name: endpoint_insert
INSERT INTO webhook_endpoint (id, service_id, url, event_types, description, secret_ciphertext,
                              secret_key_id, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)
RETURNING *;

-- name: endpoint_get
-- One endpoint of service $2 (NULL: any service), deleted ones excluded.
SELECT * FROM webhook_endpoint
 WHERE id = $1 AND ($2::text IS NULL OR service_id = $2) AND status <> 'deleted';

-- name: endpoint_list
SELECT * FROM webhook_endpoint
 WHERE ($1::text IS NULL OR service_id = $1) AND status <> 'deleted'
 ORDER BY created_at, id
 LIMIT $2;

-- name: endpoint_delete
-- Deleted endpoints stay as rows (their deliveries name them) but receive nothing more.
UPDATE webhook_endpoint SET status = 'deleted', disabled_reason = NULL, updated_at = $3
 WHERE id = $1 AND service_id = $2 AND status <> 'deleted'
RETURNING id;

-- name: endpoint_rotate
-- The new secret signs from now on; the old one also signs until $6.
UPDATE webhook_endpoint
   SET previous_secret_ciphertext = secret_ciphertext, previous_secret_key_id = secret_key_id,
       previous_secret_expires_at = $6, secret_ciphertext = $3, secret_key_id = $4, updated_at = $5
 WHERE id = $1 AND service_id = $2 AND status <> 'deleted'
RETURNING *;

-- name: endpoint_enable
UPDATE webhook_endpoint SET status = 'enabled', disabled_reason = NULL, failing_since = NULL, updated_at = $3
 WHERE id = $1 AND service_id = $2 AND status <> 'deleted'
RETURNING *;

-- name: endpoint_disable
-- Disables an enabled endpoint with reason $2; nothing when it is not enabled.
UPDATE webhook_endpoint SET status = 'disabled', disabled_reason = $2, updated_at = $3
 WHERE id = $1 AND status = 'enabled'
RETURNING id;

-- name: endpoint_record_failure
-- Marks the endpoint failing since $2 unless it already was; returns since when.
UPDATE webhook_endpoint SET failing_since = coalesce(failing_since, $2)
 WHERE id = $1
RETURNING failing_since;

-- name: endpoint_record_success
UPDATE webhook_endpoint SET failing_since = NULL WHERE id = $1 AND failing_since IS NOT NULL;

-- name: endpoint_record_success_many
-- Endpoints $1 answered: no longer failing. Rows not failing are not written (nor locked).
UPDATE webhook_endpoint SET failing_since = NULL WHERE id = ANY ($1::text[]) AND failing_since IS NOT NULL;

-- name: delivery_load
-- A delivery with what its attempt needs: the event's body and the endpoint's URL and secrets.
SELECT d.id, d.status, d.event_id, d.endpoint_id, d.service_id, e.type, e.body,
       w.url, w.status AS endpoint_status, w.secret_ciphertext, w.secret_key_id,
       w.previous_secret_ciphertext, w.previous_secret_key_id, w.previous_secret_expires_at
  FROM webhook_delivery d
  JOIN webhook_event e ON e.id = d.event_id
  JOIN webhook_endpoint w ON w.id = d.endpoint_id
 WHERE d.id = $1;

-- name: delivery_record_attempt
-- The outcome of one attempt: status $2, the response code $3, error $4, latency $5 at $6, next try $7.
UPDATE webhook_delivery
   SET status = $2::text, attempts = attempts + 1, last_status_code = $3, last_error = $4,
       last_latency_ms = $5, last_attempt_at = $6::timestamptz, next_attempt_at = $7,
       finished_at = CASE WHEN $2::text IN ('succeeded', 'dead', 'cancelled') THEN $6::timestamptz END
 WHERE id = $1 AND status IN ('pending', 'retrying')
RETURNING id;

-- name: delivery_record_success_many
-- Successful attempts of deliveries $1 (codes $2, latencies $3, at $4), in one statement; a delivery no
-- longer pending or retrying (cancelled meanwhile) is left as it is.
UPDATE webhook_delivery d
   SET status = 'succeeded', attempts = d.attempts + 1, last_status_code = r.code, last_error = NULL,
       last_latency_ms = r.latency_ms, last_attempt_at = r.at, next_attempt_at = NULL, finished_at = r.at
  FROM unnest($1::text[], $2::int[], $3::int[], $4::timestamptz[]) AS r(id, code, latency_ms, at)
 WHERE d.id = r.id AND d.status IN ('pending', 'retrying');

-- name: delivery_cancel
-- A delivery whose endpoint no longer receives (disabled, deleted) ends without an attempt.
UPDATE webhook_delivery SET status = 'cancelled', last_error = $2, finished_at = $3, next_attempt_at = NULL
 WHERE id = $1 AND status IN ('pending', 'retrying')
RETURNING id;

-- name: delivery_dead_with_job
-- The unfinished delivery carried by job $1, which died outside its handler (rescued too often from
-- workers that stopped, or failed where the handler recorded nothing): dead with reason $2, so it is
-- listed and replayed as any dead letter instead of staying pending with no job to try it.
UPDATE webhook_delivery AS d
   SET status = 'dead', last_error = $2, finished_at = now(), next_attempt_at = NULL
  FROM job AS j
 WHERE j.id = $1 AND d.id = j.payload ->> 'delivery_id' AND d.job_id = j.id
   AND d.status IN ('pending', 'retrying')
RETURNING d.id;

-- name: delivery_list
-- Newest first, for service $1 (NULL: all), optionally one endpoint $2 or status $3, before cursor
-- ($4 created_at, $5 id).
SELECT d.id, d.event_id, d.endpoint_id, d.service_id, e.type, d.status, d.attempts, d.last_status_code,
       d.last_error, d.last_latency_ms, d.last_attempt_at, d.next_attempt_at, d.created_at, d.finished_at,
       d.job_id
  FROM webhook_delivery d
  JOIN webhook_event e ON e.id = d.event_id
 WHERE ($1::text IS NULL OR d.service_id = $1)
   AND ($2::text IS NULL OR d.endpoint_id = $2)
   AND ($3::text IS NULL OR d.status = $3)
   AND ($4::timestamptz IS NULL OR (d.created_at, d.id) < ($4, $5))
 ORDER BY d.created_at DESC, d.id DESC
 LIMIT $6;

-- name: delivery_get
SELECT d.id, d.event_id, d.endpoint_id, d.service_id, e.type, d.status, d.attempts, d.last_status_code,
       d.last_error, d.last_latency_ms, d.last_attempt_at, d.next_attempt_at, d.created_at, d.finished_at,
       d.job_id
  FROM webhook_delivery d
  JOIN webhook_event e ON e.id = d.event_id
 WHERE d.id = $1 AND ($2::text IS NULL OR d.service_id = $2);

-- name: delivery_lock
SELECT status FROM webhook_delivery WHERE id = $1 FOR UPDATE;

-- name: delivery_restart
-- A replay: the delivery goes back to pending with job $2 (its attempts count on).
UPDATE webhook_delivery SET status = 'pending', job_id = $2, finished_at = NULL, next_attempt_at = $3
 WHERE id = $1
RETURNING id;
