-- The PSP statements, read only by application/psp/store.py.

-- name: psp_tx_insert
-- A payout's PSP transaction, written NEW in the confirm's own transaction.
INSERT INTO psp_tx (id, intent_id, psp, amount, currency, beneficiary, idempotency_key)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (intent_id) DO NOTHING
RETURNING *;

-- name: psp_tx_get
SELECT * FROM psp_tx WHERE id = $1;

-- name: psp_tx_get_started_many
-- The load of the payout jobs a worker starts at once ($1): in one statement and one commit, the NEW
-- transactions are locked in id order (the order every group of payouts takes them) and moved to
-- QUERY_PENDING (committed before the beneficiary check is sent, as the write-ahead wants); the
-- others are read as they are, from the snapshot the statement started from.
WITH locked AS (
    SELECT id FROM psp_tx WHERE id = ANY ($1::uuid[]) AND state = 'NEW' ORDER BY id FOR UPDATE
), moved AS (
    UPDATE psp_tx SET state = 'QUERY_PENDING', version = psp_tx.version + 1, updated_at = now()
      FROM locked
     WHERE psp_tx.id = locked.id AND psp_tx.state = 'NEW'
    RETURNING psp_tx.*
)
SELECT * FROM moved
UNION ALL
SELECT * FROM psp_tx WHERE id = ANY ($1::uuid[]) AND id NOT IN (SELECT id FROM moved);

-- name: psp_tx_get_for_update
SELECT * FROM psp_tx WHERE id = $1 FOR UPDATE;

-- name: psp_tx_lock_many
-- Locks transactions $1 in id order (a group of payouts ending in one transaction: payout.py).
SELECT * FROM psp_tx WHERE id = ANY ($1::uuid[]) ORDER BY id FOR UPDATE;

-- name: psp_tx_end_many
-- Ends the transactions $1, read at versions $2, in states $3 (COMPLETED or FAILED) with the PSP's
-- references $4 and reasons $5: one statement for the payouts a worker ends in one transaction
-- (payout.end_payouts), whose rows it locked first, so every one matches.
UPDATE psp_tx AS t
   SET state = e.state, version = t.version + 1,
       confirm_ref = coalesce(e.confirm_ref, t.confirm_ref), last_error = coalesce(e.last_error, t.last_error),
       updated_at = now(), finished_at = now()
  FROM unnest($1::uuid[], $2::integer[], $3::text[], $4::text[], $5::text[])
       AS e(id, version, state, confirm_ref, last_error)
 WHERE t.id = e.id AND t.version = e.version
RETURNING t.*;

-- name: psp_tx_by_intent
SELECT * FROM psp_tx WHERE intent_id = $1;

-- name: psp_tx_by_reference
-- A webhook names a payout by our transaction id or (Wise) by its idempotency key.
SELECT * FROM psp_tx
 WHERE psp = $1 AND (id::text = $2 OR idempotency_key::text = $2)
 FOR UPDATE;

-- name: psp_tx_move
-- Compare-and-set on (state, version): a worker whose view is stale changes nothing.
UPDATE psp_tx
   SET state = $4, version = version + 1, attempts = $5,
       query_ref = coalesce($6, query_ref), confirm_ref = coalesce($7, confirm_ref),
       last_error = coalesce($8, last_error), updated_at = now(),
       finished_at = CASE WHEN $4 IN ('COMPLETED', 'FAILED') THEN now() END,
       resolved_by = coalesce($9, resolved_by),
       resolved_at = CASE WHEN $9 IS NULL THEN resolved_at ELSE now() END,
       resolution = coalesce($10, resolution)
 WHERE id = $1 AND state = $2 AND version = $3
RETURNING *;

-- name: psp_tx_query_accepted_many
-- QUERY_PENDING -> QUERIED -> CONFIRM_PENDING for the transactions $1 (in id order) still at
-- (QUERY_PENDING, version $2), with the query_refs $3: one statement and one commit for a group of
-- payouts whose beneficiary the PSP accepted. psp_tx_query_accepted (migration 0403) makes the two
-- moves the schema's trigger checks one by one, and returns nothing for a transaction that moved
-- meanwhile. A row per transaction moved, with its place in $1 (1-based; given twice, it moves once).
SELECT a.n AS given_at, r.*
  FROM unnest($1::uuid[], $2::integer[], $3::text[]) WITH ORDINALITY AS a (id, version, query_ref, n)
 CROSS JOIN LATERAL psp_tx_query_accepted(a.id, a.version, a.query_ref) AS r
 ORDER BY a.n;

-- name: psp_tx_list
SELECT * FROM psp_tx
 WHERE ($1::text IS NULL OR state = $1) AND ($2::text IS NULL OR psp = $2)
 ORDER BY created_at DESC, id
 LIMIT $3;

-- name: psp_tx_open_without_job
-- Open transactions (not terminal, not waiting for a person) whose job is gone.
SELECT t.* FROM psp_tx t
 WHERE t.state NOT IN ('COMPLETED', 'FAILED', 'MANUAL_REVIEW')
   AND NOT EXISTS (
       SELECT 1 FROM job j
        WHERE j.unique_key = 'psp.payout:' || t.id::text
          AND j.state NOT IN ('completed', 'dead', 'cancelled'))
 ORDER BY t.created_at
 LIMIT $1;

-- name: psp_tx_terminal_unsettled
-- A terminal transaction whose intent is still confirmed: its settlement did not run yet.
SELECT t.* FROM psp_tx t JOIN intent i ON i.id = t.intent_id
 WHERE t.state IN ('COMPLETED', 'FAILED') AND i.status = 'confirmed'
 LIMIT $1;

-- name: payout_intents_without_tx
-- Confirmed payouts (channels $2; confirmed before PSP transactions existed) without a PSP transaction.
SELECT i.id FROM intent i
 WHERE i.status = 'confirmed' AND i.channel = ANY ($2::text[])
   AND NOT EXISTS (SELECT 1 FROM psp_tx t WHERE t.intent_id = i.id)
 LIMIT $1;

-- name: psp_config_upsert
INSERT INTO psp_config (psp, key_id, ciphertext, updated_at) VALUES ($1, $2, $3, now())
ON CONFLICT (psp) DO UPDATE SET key_id = EXCLUDED.key_id, ciphertext = EXCLUDED.ciphertext,
                                updated_at = now();

-- name: psp_config_get
SELECT * FROM psp_config WHERE psp = $1;

-- name: psp_config_all
SELECT * FROM psp_config ORDER BY psp;

-- name: psp_webhook_insert
-- Stored once per PSP event id: a repeated delivery inserts nothing.
INSERT INTO psp_webhook_event (psp, event_id, body) VALUES ($1, $2, $3)
ON CONFLICT (psp, event_id) DO NOTHING
RETURNING psp, event_id;

-- name: psp_webhook_get
SELECT * FROM psp_webhook_event WHERE psp = $1 AND event_id = $2 FOR UPDATE;

-- name: psp_webhook_done
UPDATE psp_webhook_event SET processed_at = now(), outcome = $3 WHERE psp = $1 AND event_id = $2;

-- name: balance_check_upsert
-- The latest check; returns the state it replaced (NULL for the first), read under the row lock so
-- two monitors racing on one tick see one change, not two.
WITH previous AS (
    SELECT state FROM psp_balance_check WHERE psp = $1 AND currency = $2 FOR UPDATE
), upsert AS (
    INSERT INTO psp_balance_check (psp, currency, state, ledger_balance, partner_balance, error, checked_at,
                                   changed_at)
    VALUES ($1, $2, $3, $4, $5, $6, now(), now())
    ON CONFLICT (psp, currency) DO UPDATE
       SET state = EXCLUDED.state, ledger_balance = EXCLUDED.ledger_balance,
           partner_balance = EXCLUDED.partner_balance, error = EXCLUDED.error, checked_at = now(),
           changed_at = CASE WHEN psp_balance_check.state = EXCLUDED.state
                             THEN psp_balance_check.changed_at ELSE now() END
    RETURNING state
)
SELECT (SELECT state FROM previous) AS previous_state;

-- name: balance_alert_insert
INSERT INTO psp_balance_alert (psp, currency, state, previous_state, ledger_balance, partner_balance, error)
VALUES ($1, $2, $3, $4, $5, $6, $7);

-- name: balance_checks
SELECT * FROM psp_balance_check ORDER BY psp, currency;

-- name: balance_alerts
SELECT * FROM psp_balance_alert WHERE ($1::text IS NULL OR psp = $1) ORDER BY id;

-- name: balance_tick_claim
-- Claims the tick of `psp` when it is due, moving it $2 ms ahead: one row back for the one monitor
-- that claimed it (ON CONFLICT re-checks the WHERE on the latest row version under its lock).
INSERT INTO psp_balance_tick (psp, due_at) VALUES ($1, now() + $2 * interval '1 ms')
ON CONFLICT (psp) DO UPDATE SET due_at = now() + $2 * interval '1 ms'
 WHERE psp_balance_tick.due_at <= now()
RETURNING psp;
