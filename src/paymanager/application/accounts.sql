-- name: account_insert
INSERT INTO account (id, kind, currency, owner_service_id, reference, created_at)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (owner_service_id, reference) WHERE reference IS NOT NULL DO NOTHING
RETURNING *;

-- name: account_get
SELECT * FROM account WHERE id = $1;

-- name: account_get_many
SELECT * FROM account WHERE id = ANY($1::uuid[]);

-- name: account_lock
-- Serialises the daily-volume check of one payer account.
SELECT id FROM account WHERE id = $1 FOR UPDATE;

-- name: account_insert_system
INSERT INTO account (id, kind, currency, name, created_at)
VALUES ($1, 'system', $2, $3, now())
ON CONFLICT (name) DO NOTHING;

-- name: account_system_list
SELECT id, name, currency FROM account WHERE kind = 'system';
