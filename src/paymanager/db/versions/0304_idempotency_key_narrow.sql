-- Idempotency-Keys in fewer bytes (bench/footprint.py; docs/BENCHMARKS.md, "Storage"), two per p2p
-- intent for a day at least:
-- - request_hash keeps 16 bytes of the SHA-256 (`keys.request_hash`), as the key id does: it tells a
--   service's own requests apart, which 128 bits do as surely as 256;
-- - created_at is not kept: only the claim of an expired key compared against it, and that compares
--   the new request's time (a parameter) with expires_at;
-- - columns in an order that needs no alignment padding (16-byte ids and 8-byte times first, then the
--   4- and 2-byte numbers, then the short variable-length values).
-- Queries: `idempotency_key_claim_signed`, `idempotency_key_get` and `idempotency_key_store` use the
-- primary key; `idempotency_key_prune` uses idempotency_key_expires_idx. Rebuilt table: a
-- stop-and-migrate deploy (docs/OPERATIONS.md). The keys of the day are carried over, their hashes cut
-- to the same 16 bytes, so their replays still match.
CREATE TABLE idempotency_key_narrow (
    id                uuid PRIMARY KEY,
    expires_at        timestamptz NOT NULL,
    response_ref      uuid,
    response_version  integer CHECK (response_version >= 1),
    status_code       smallint CHECK (status_code BETWEEN 200 AND 599),
    request_hash      bytea NOT NULL CHECK (length(request_hash) = 16),
    response_digest   bytea CHECK (length(response_digest) = 16),
    path              text NOT NULL,
    response_body     jsonb,
    -- An outcome is a body or a reference with its digest, never both; none while the first request runs.
    CONSTRAINT idempotency_key_outcome CHECK (
        (status_code IS NULL AND response_body IS NULL AND response_ref IS NULL)
        OR (status_code IS NOT NULL AND (response_body IS NULL) <> (response_ref IS NULL))
    ),
    CONSTRAINT idempotency_key_reference CHECK (
        (response_ref IS NULL) = (response_version IS NULL) AND (response_ref IS NULL) = (response_digest IS NULL)
    )
);

INSERT INTO idempotency_key_narrow (id, expires_at, response_ref, response_version, status_code, request_hash,
                                    response_digest, path, response_body)
SELECT id, expires_at, response_ref, response_version, status_code, substr(request_hash, 1, 16),
       response_digest, path, response_body
  FROM idempotency_key
 WHERE status_code IS NOT NULL;

DROP TABLE idempotency_key;
ALTER TABLE idempotency_key_narrow RENAME TO idempotency_key;
ALTER INDEX idempotency_key_narrow_pkey RENAME TO idempotency_key_pkey;
CREATE INDEX idempotency_key_expires_idx ON idempotency_key (expires_at);
-- A churning table (a day of keys, pruned continuously): vacuumed early so freed space is reused.
ALTER TABLE idempotency_key SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.1);
