-- name: refund_insert
INSERT INTO refund (id, intent_id, service_id, amount, fee_refunded, currency, reason, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)
RETURNING *;

-- name: refund_totals
-- What refunds not failed of intent $1 took: amount and fee.
SELECT coalesce(sum(amount), 0)::bigint AS amount, coalesce(sum(fee_refunded), 0)::bigint AS fee
  FROM refund
 WHERE intent_id = $1 AND status <> 'failed';

-- name: refund_settled
-- The amount and fee an intent settled with (a capture's are what it posted), or nothing when it did
-- not settle.
SELECT coalesce(amount_captured, amount) AS amount, coalesce(fee_captured, fee) AS fee
  FROM intent
 WHERE id = $1 AND status = 'settled';

-- name: refund_get
SELECT * FROM refund WHERE id = $1;

-- name: refund_lock
SELECT * FROM refund WHERE id = $1 FOR UPDATE;

-- name: refund_list
SELECT * FROM refund WHERE intent_id = $1 ORDER BY created_at, id LIMIT $2;

-- name: refund_finish
-- Ends a pending refund with status $2 (and failure reason $3) at $4; nothing when it is not pending.
UPDATE refund SET status = $2, failure_reason = $3, updated_at = $4, finished_at = $4
 WHERE id = $1 AND status = 'pending'
RETURNING *;
