-- An Idempotency-Key's row keeps what its replays need and nothing more (bench/footprint.py;
-- docs/BENCHMARKS.md, "Storage"):
-- - no `path`: it served only the `first_path` detail of a 409 for a key reused with another
--   request, and a confirm's path (46 bytes) was the widest value of the row; the request hash
--   still covers the method, path and body, so a reuse is still refused.
-- - `request_hash` and `response_digest` of 8 bytes (64 bits of SHA-256): a false match needs a
--   client to reuse a key for another request, or a rebuilt body to differ, and then agree in 64
--   bits. Rows of the previous release keep their 16 bytes until their TTL; the code compares a
--   stored digest with as many bytes of its own as the row holds.
-- - no index on `expires_at`: the api sweeper forgets expired keys by walking the table's pages
--   (`idempotency_key_prune_pages`, a TID range scan per statement), so each POST writes one index
--   entry instead of two. A key past its TTL and not yet swept is never replayed: the claim reads
--   only keys with `expires_at > now`, and the store takes such a row over in place.
-- Queries: idempotency_key_claim_signed and idempotency_key_store use idempotency_key_pkey.
DROP FUNCTION idempotency_key_claim_signed(text, uuid, timestamptz, bytea, timestamptz);
DROP INDEX idempotency_key_expires_idx;
ALTER TABLE idempotency_key
    DROP COLUMN path,
    DROP CONSTRAINT idempotency_key_narrow_request_hash_check,
    DROP CONSTRAINT idempotency_key_narrow_response_digest_check,
    ADD CONSTRAINT idempotency_key_request_hash_length CHECK (length(request_hash) IN (8, 16)),
    ADD CONSTRAINT idempotency_key_response_digest_length CHECK (length(response_digest) IN (8, 16));

-- As migration 0307's, without the path.
CREATE FUNCTION idempotency_key_claim_signed(
    p_service_id text, p_key_id uuid, p_now timestamptz, p_signature bytea, p_signature_expires_at timestamptz
) RETURNS TABLE (
    fresh_signature boolean, request_hash bytea, status_code smallint, response_body jsonb,
    response_ref uuid, response_version integer, response_digest bytea
)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    INSERT INTO request_signature AS s (signature, service_id, expires_at)
    VALUES (p_signature, p_service_id, p_signature_expires_at)
    ON CONFLICT (signature) DO NOTHING;
    IF NOT FOUND THEN
        RETURN QUERY SELECT false, NULL::bytea, NULL::smallint, NULL::jsonb, NULL::uuid, NULL::integer,
                            NULL::bytea;
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(7478, hashtext(p_key_id::text));
    RETURN QUERY
        SELECT true, k.request_hash, k.status_code, k.response_body, k.response_ref, k.response_version,
               k.response_digest
          FROM (SELECT) AS one
          LEFT JOIN idempotency_key AS k ON k.id = p_key_id AND k.expires_at > p_now AND k.status_code IS NOT NULL;
END
$$;
