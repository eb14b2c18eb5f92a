-- A payout whose beneficiary the PSP accepted goes QUERY_PENDING -> QUERIED -> CONFIRM_PENDING: two
-- moves, each checked by psp_tx_transition (version + 1 each), that the payout job used to commit
-- one at a time. This function makes them in one statement, so one round trip and one commit, and
-- still commits CONFIRM_PENDING before the transfer is sent (application/psp/payout.py). A
-- transaction no longer at (QUERY_PENDING, expected_version) is left alone: no row comes back.

CREATE FUNCTION psp_tx_query_accepted(tx_id uuid, expected_version integer, new_query_ref text)
    RETURNS SETOF psp_tx LANGUAGE plpgsql AS $$
BEGIN
    UPDATE psp_tx SET state = 'QUERIED', version = version + 1, query_ref = new_query_ref, updated_at = now()
     WHERE id = tx_id AND state = 'QUERY_PENDING' AND version = expected_version;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
        UPDATE psp_tx SET state = 'CONFIRM_PENDING', version = version + 1, updated_at = now()
         WHERE id = tx_id
        RETURNING *;
END
$$;
