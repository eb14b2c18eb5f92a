-- name: idempotency_key_claim_signed
-- The first statement of a signed POST, in one round trip: remembers the request's signature $6 of
-- service $1 (kept until $7; see request_signature_remember) and claims key $2 (`keys.key_id`) at
-- $5 until $8. A concurrent claim of the same key waits until the first transaction ends; a key
-- expired at $5 is taken over. fresh_signature is false for a replayed signature; claimed is false
-- when an outcome is stored.
-- Both inserts run in this order in every transaction, so concurrent requests lock alike.
WITH remembered AS (
    INSERT INTO request_signature (signature, service_id, expires_at)
    VALUES ($6, $1, $7)
    ON CONFLICT (signature) DO NOTHING
    RETURNING 1
), claimed AS (
    INSERT INTO idempotency_key (id, path, request_hash, expires_at)
    VALUES ($2, $3, $4, $8)
    ON CONFLICT (id) DO UPDATE
       SET path = EXCLUDED.path, request_hash = EXCLUDED.request_hash, status_code = NULL,
           response_body = NULL, response_ref = NULL, response_version = NULL, response_digest = NULL,
           expires_at = EXCLUDED.expires_at
     WHERE idempotency_key.expires_at <= $5
    RETURNING 1
)
SELECT EXISTS (SELECT FROM remembered) AS fresh_signature, EXISTS (SELECT FROM claimed) AS claimed;

-- name: idempotency_key_get
SELECT path, request_hash, status_code, response_body, response_ref, response_version, response_digest
  FROM idempotency_key
 WHERE id = $1;

-- name: idempotency_key_store
-- Stores the outcome of key $1: status $2 with body $3, or with the reference $4 (version $5, digest
-- $6) that rebuilds it; and sends each NOTIFY of $8 on channel $7, in one round trip: a POST's last
-- statement before its commit (see run_idempotent).
WITH stored AS (
    UPDATE idempotency_key
       SET status_code = $2, response_body = $3, response_ref = $4, response_version = $5, response_digest = $6
     WHERE id = $1
)
SELECT pg_notify($7, notice) FROM unnest($8::text[]) AS notice;

-- name: idempotency_key_prune
DELETE FROM idempotency_key
 WHERE id IN (SELECT id FROM idempotency_key WHERE expires_at < $1 LIMIT $2);
