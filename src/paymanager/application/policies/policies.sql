-- name: policy_upsert
INSERT INTO policy (id, channel, service_id, min_amount, max_amount, daily_volume_per_account, currencies,
                    created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)
ON CONFLICT (channel, service_id) DO UPDATE
   SET min_amount = EXCLUDED.min_amount, max_amount = EXCLUDED.max_amount,
       daily_volume_per_account = EXCLUDED.daily_volume_per_account, currencies = EXCLUDED.currencies,
       updated_at = EXCLUDED.updated_at
RETURNING *;

-- name: policy_list
SELECT * FROM policy ORDER BY channel, service_id NULLS FIRST LIMIT $1;

-- name: policy_get
SELECT * FROM policy WHERE id = $1;

-- name: policy_delete
DELETE FROM policy WHERE id = $1 RETURNING id;

-- name: policy_matching
-- The channel-wide policy of channel $1 and the one of service $2.
SELECT * FROM policy WHERE channel = $1 AND (service_id IS NULL OR service_id = $2);
