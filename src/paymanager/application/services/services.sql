-- name: service_insert
-- Registers a service whose secret is already sealed.
INSERT INTO service (id, name, secret_ciphertext, secret_key_id, scopes)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (name) DO NOTHING
RETURNING id, name, scopes, created_at;

-- name: service_get
SELECT id, name, secret_ciphertext, secret_key_id, scopes, disabled_at, requests_per_sec_max
  FROM service
 WHERE id = $1;

-- name: service_list
SELECT id, name, scopes, created_at, disabled_at, requests_per_sec_max
  FROM service ORDER BY created_at LIMIT $1;

-- name: service_set_rate_limit
-- Sets (or with NULL removes) a service's own requests-per-second limit; returns nothing for no such service.
UPDATE service SET requests_per_sec_max = $2 WHERE id = $1 RETURNING id;

-- name: request_signature_remember
-- Records a signature; returns a row only the first time it is seen (a replay returns nothing).
INSERT INTO request_signature (signature, service_id, expires_at)
VALUES ($1, $2, $3)
ON CONFLICT (signature) DO NOTHING
RETURNING 1;

-- name: request_signature_prune
-- Forgets up to $2 signatures whose timestamps are out of the window at $1.
DELETE FROM request_signature
 WHERE signature IN (SELECT signature FROM request_signature WHERE expires_at < $1 LIMIT $2);

-- name: service_exists
SELECT 1 FROM service WHERE id = $1;
