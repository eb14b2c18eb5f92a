-- name: idempotency_key_claim_signed
-- The first statement of a signed POST, in one round trip (the function of migration 0307): remembers
-- the request's signature $4 of service $1 (kept until $5; see request_signature_remember) and, unless
-- it is a replay, locks key $2 (`keys.key_id`) to the end of the transaction and reads its outcome
-- live at $3. A concurrent request with the same key waits until the first transaction ends.
-- fresh_signature is false for a replayed signature; status_code is NULL when no outcome is stored.
SELECT * FROM idempotency_key_claim_signed($1, $2, $3, $4, $5);

-- name: idempotency_key_store
-- Stores key $1 with its request (path $7, hash $8, kept until $9) and outcome: status $2 with body
-- $3, or with the reference $4 (version $5, digest $6) that rebuilds it; and sends each NOTIFY of $11
-- on channel $10, in one round trip: a POST's last statement before its commit (see run_idempotent).
-- The key's lock is held (idempotency_key_claim_signed), so the row met is one past its TTL.
WITH stored AS (
    INSERT INTO idempotency_key (id, expires_at, response_ref, response_version, status_code, request_hash,
                                 response_digest, path, response_body)
    VALUES ($1, $9, $4, $5, $2, $8, $6, $7, $3)
    ON CONFLICT (id) DO UPDATE
       SET expires_at = EXCLUDED.expires_at, response_ref = EXCLUDED.response_ref,
           response_version = EXCLUDED.response_version, status_code = EXCLUDED.status_code,
           request_hash = EXCLUDED.request_hash, response_digest = EXCLUDED.response_digest,
           path = EXCLUDED.path, response_body = EXCLUDED.response_body
)
SELECT pg_notify($10, notice) FROM unnest($11::text[]) AS notice;

-- name: idempotency_key_prune
DELETE FROM idempotency_key
 WHERE id IN (SELECT id FROM idempotency_key WHERE expires_at < $1 LIMIT $2);
