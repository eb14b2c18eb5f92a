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
-- Serialises the daily-volume check of one payer account. FOR NO KEY UPDATE, not FOR UPDATE: an
-- intent's insert takes FOR KEY SHARE on its payee's row (the foreign key), which FOR UPDATE blocks,
-- so A -> B and B -> A created at once deadlocked (a 500 for one of them).
SELECT id FROM account WHERE id = $1 FOR NO KEY UPDATE;

-- name: account_insert_system
INSERT INTO account (id, kind, currency, name, created_at)
VALUES ($1, 'system', $2, $3, now())
ON CONFLICT (name) DO NOTHING;

-- name: account_system_list
SELECT id, name, currency FROM account WHERE kind = 'system';
