-- name: idempotency_key_claim_signed
-- The first statement of a signed POST, in one round trip (the function of migration 0307): remembers
-- the request's signature $4 of service $1 (kept until $5; see request_signature_remember) and, unless
-- it is a replay, locks key $2 (`keys.key_id`) to the end of the transaction and reads its outcome
-- live at $3. A concurrent request with the same key waits until the first transaction ends.
-- fresh_signature is false for a replayed signature; status_code is NULL when no outcome is stored.
SELECT * FROM idempotency_key_claim_signed($1, $2, $3, $4, $5);

-- name: idempotency_key_store
-- Stores key $1 with its request's hash $7 (kept until $8) and outcome: status $2 with body $3, or
-- with the reference $4 (version $5, digest $6) that rebuilds it; and sends each NOTIFY of $10 on
-- channel $9, in one round trip: a POST's last statement before its commit (see run_idempotent).
-- The key's lock is held (idempotency_key_claim_signed), so the row met is one past its TTL.
WITH stored AS (
    INSERT INTO idempotency_key (id, expires_at, response_ref, response_version, status_code, request_hash,
                                 response_digest, response_body)
    VALUES ($1, $8, $4, $5, $2, $7, $6, $3)
    ON CONFLICT (id) DO UPDATE
       SET expires_at = EXCLUDED.expires_at, response_ref = EXCLUDED.response_ref,
           response_version = EXCLUDED.response_version, status_code = EXCLUDED.status_code,
           request_hash = EXCLUDED.request_hash, response_digest = EXCLUDED.response_digest,
           response_body = EXCLUDED.response_body
)
SELECT pg_notify($9, notice) FROM unnest($10::text[]) AS notice;

-- name: idempotency_key_prune_pages
-- Forgets the keys past their TTL at $1 held in pages [$2, $3) of the table, by a TID range scan
-- (no index on expires_at is kept: migration 0352); the keys deleted, and the table's size in pages
-- for the sweeper's next range.
WITH gone AS (
    DELETE FROM idempotency_key
     WHERE ctid >= format('(%s,0)', $2::bigint)::tid AND ctid < format('(%s,0)', $3::bigint)::tid
       AND expires_at < $1
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone) AS deleted,
       pg_relation_size('idempotency_key') / current_setting('block_size')::bigint AS pages;
