-- An Idempotency-Key written once, with its outcome, instead of claimed by an empty row that the end
-- of the request then updates (bench/footprint.py; docs/BENCHMARKS.md, "Storage"): each key left a
-- dead version behind (and about one in fifteen updates found no room on its page, a second index
-- entry), so pages ended about 80 % full.
--
-- The claim becomes a transaction-level advisory lock on the key id, taken by the request's first
-- statement and held to its commit or rollback, as the claim row's lock was: a concurrent request
-- with the same key waits for the first to end, then reads the row the first committed (and replays
-- it) or, if it rolled back, finds none and runs the work itself. The row is inserted by the
-- request's last statement (`idempotency_key_store`), and takes over a key past its TTL in place.
-- No row without an outcome is written any more (the CHECKs still allow those of a process of the
-- previous release during a deploy).
--
-- idempotency_key_claim_signed: the request's signature remembered (request_signature_remember),
-- then, unless it is a replay, the key's lock and its live outcome in one round trip. A function, so
-- that the read after the lock sees what a transaction that held it committed (each statement of a
-- VOLATILE function takes its own snapshot). The lock's first key (7478) sets these apart from the
-- other advisory locks (7477: the ledger and the history partitions).
-- Queries: the function and idempotency_key_store use idempotency_key_pkey; idempotency_key_prune
-- uses idempotency_key_expires_idx.
CREATE FUNCTION idempotency_key_claim_signed(
    p_service_id text, p_key_id uuid, p_now timestamptz, p_signature bytea, p_signature_expires_at timestamptz
) RETURNS TABLE (
    fresh_signature boolean, path text, request_hash bytea, status_code smallint, response_body jsonb,
    response_ref uuid, response_version integer, response_digest bytea
)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    INSERT INTO request_signature AS s (signature, service_id, expires_at)
    VALUES (p_signature, p_service_id, p_signature_expires_at)
    ON CONFLICT (signature) DO NOTHING;
    IF NOT FOUND THEN
        RETURN QUERY SELECT false, NULL::text, NULL::bytea, NULL::smallint, NULL::jsonb, NULL::uuid,
                            NULL::integer, NULL::bytea;
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(7478, hashtext(p_key_id::text));
    RETURN QUERY
        SELECT true, k.path, k.request_hash, k.status_code, k.response_body, k.response_ref,
               k.response_version, k.response_digest
          FROM (SELECT) AS one
          LEFT JOIN idempotency_key AS k ON k.id = p_key_id AND k.expires_at > p_now AND k.status_code IS NOT NULL;
END
$$;
