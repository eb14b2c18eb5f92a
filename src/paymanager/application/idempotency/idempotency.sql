-- name: idempotency_key_claim_signed
-- The first statement of a signed POST, in one round trip: remembers the request's signature $8
-- (kept until $9; see request_signature_remember) and claims key $2 of service $1. A concurrent claim
-- of the same key waits until the first transaction ends; an expired key is taken over.
-- fresh_signature is false for a replayed signature; claimed is false when an outcome is stored.
-- Both inserts run in this order in every transaction, so concurrent requests lock alike.
WITH remembered AS (
    INSERT INTO request_signature (signature, service_id, expires_at)
    VALUES ($8, $1, $9)
    ON CONFLICT (signature) DO NOTHING
    RETURNING 1
), claimed AS (
    INSERT INTO idempotency_key (service_id, key, method, path, request_hash, created_at, expires_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7)
    ON CONFLICT (service_id, key) DO UPDATE
       SET method = EXCLUDED.method, path = EXCLUDED.path, request_hash = EXCLUDED.request_hash,
           status_code = NULL, response_body = NULL, created_at = EXCLUDED.created_at,
           expires_at = EXCLUDED.expires_at
     WHERE idempotency_key.expires_at <= EXCLUDED.created_at
    RETURNING 1
)
SELECT EXISTS (SELECT FROM remembered) AS fresh_signature, EXISTS (SELECT FROM claimed) AS claimed;

-- name: idempotency_key_get
SELECT method, path, request_hash, status_code, response_body
  FROM idempotency_key
 WHERE service_id = $1 AND key = $2;

-- name: idempotency_key_store
-- Stores outcome ($3, $4) of key $2 of service $1 and sends each NOTIFY of $6 on channel $5, in one
-- round trip: a POST's last statement before its commit (see run_idempotent).
WITH stored AS (
    UPDATE idempotency_key SET status_code = $3, response_body = $4 WHERE service_id = $1 AND key = $2
)
SELECT pg_notify($5, notice) FROM unnest($6::text[]) AS notice;

-- name: idempotency_key_prune
DELETE FROM idempotency_key
 WHERE (service_id, key) IN (SELECT service_id, key FROM idempotency_key WHERE expires_at < $1 LIMIT $2);
