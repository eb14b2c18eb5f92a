-- Idempotency-Keys in about a sixth of the space (bench/footprint.py, docs/BENCHMARKS.md "Storage").
--
-- A key is kept for its TTL (24 h), two per p2p intent (create, confirm), and each row held a copy of
-- its whole response body (about 1 KB). Now:
-- - the row is found by `id`, the first 16 bytes of SHA-256(service_id, "\n", key)
--   (`application.idempotency.keys.key_id`): a 16-byte primary key instead of two texts of up to 292
--   bytes, the service and the key themselves not kept (the request that brings the key again has
--   both);
-- - a response that shows an intent keeps a reference (the intent's id and the version the response
--   showed) and a digest of the body instead of the body: a replay rebuilds the view of that version
--   from the intent and answers it only when its digest matches (`unit_of_work.py`); any other
--   response (errors, quotes, accounts, policies) keeps its body;
-- - the method is not kept: only POSTs are idempotent, and `request_hash` covers method, path and body.
-- Queries: `idempotency_key_claim_signed` and `idempotency_key_get` use the primary key;
-- `idempotency_key_prune` uses idempotency_key_expires_idx.
--
-- Keys live a day: those stored before this migration are carried over with their bodies.
CREATE TABLE idempotency_key_new (
    id                uuid PRIMARY KEY,
    request_hash      bytea NOT NULL CHECK (length(request_hash) = 32),
    status_code       smallint CHECK (status_code BETWEEN 200 AND 599),
    response_body     jsonb,
    response_ref      uuid,
    response_version  integer CHECK (response_version >= 1),
    response_digest   bytea CHECK (length(response_digest) = 16),
    created_at        timestamptz NOT NULL,
    expires_at        timestamptz NOT NULL,
    path              text NOT NULL,
    -- An outcome is a body or a reference with its digest, never both; none while the first request runs.
    CONSTRAINT idempotency_key_outcome CHECK (
        (status_code IS NULL AND response_body IS NULL AND response_ref IS NULL)
        OR (status_code IS NOT NULL AND (response_body IS NULL) <> (response_ref IS NULL))
    ),
    CONSTRAINT idempotency_key_reference CHECK (
        (response_ref IS NULL) = (response_version IS NULL) AND (response_ref IS NULL) = (response_digest IS NULL)
    ),
    CHECK (expires_at >= created_at + interval '24 hours')
);

INSERT INTO idempotency_key_new (id, request_hash, status_code, response_body, created_at, expires_at, path)
SELECT substr(encode(sha256(convert_to(service_id || E'\n' || key, 'UTF8')), 'hex'), 1, 32)::uuid,
       request_hash, status_code, response_body, created_at, expires_at, path
  FROM idempotency_key
 WHERE status_code IS NOT NULL;

DROP TABLE idempotency_key;
ALTER TABLE idempotency_key_new RENAME TO idempotency_key;
ALTER INDEX idempotency_key_new_pkey RENAME TO idempotency_key_pkey;
CREATE INDEX idempotency_key_expires_idx ON idempotency_key (expires_at);
-- A churning table (a day of keys, pruned continuously): vacuumed early so freed space is reused.
ALTER TABLE idempotency_key SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.1);
