-- name: intent_insert
INSERT INTO intent (id, service_id, channel, amount, fee, currency, payer_account_id, payee_account_id,
                    fee_account_id, description, metadata, created_at, updated_at, expires_at, capture_method)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12, $13, $14)
RETURNING *;

-- name: intent_parties_and_policies
-- What a new intent is checked against, in one round trip: a row per account of $1 that exists (its
-- policy column NULL), then a row per policy of channel $2 that applies to service $3 (as JSON, its
-- account columns NULL).
SELECT id, kind, currency, owner_service_id, NULL::jsonb AS policy
  FROM account
 WHERE id = ANY($1::uuid[])
UNION ALL
SELECT NULL, NULL, NULL, NULL, to_jsonb(policy)
  FROM policy
 WHERE channel = $2 AND (service_id IS NULL OR service_id = $3);

-- name: intent_get
SELECT * FROM intent WHERE id = $1;

-- name: intent_lock
-- Serialises every change of one intent (confirm, cancel, settle, reconcile) on its row.
SELECT * FROM intent WHERE id = $1 FOR UPDATE;

-- name: intent_confirm
-- Confirms intent $1 at $2 if it is created and not past its expiry at $2, taking its row lock in the
-- same round trip; nothing otherwise (confirm_intent then decides under the lock, see there). A manual
-- intent goes to requires_capture with its capture deadline $5, the others to confirmed with $3.
UPDATE intent
   SET status = CASE capture_method WHEN 'manual' THEN 'requires_capture' ELSE 'confirmed' END,
       version = version + 1, confirmed_at = $2, updated_at = $2,
       settle_deadline_at = CASE capture_method WHEN 'manual' THEN $5::timestamptz ELSE $3::timestamptz END,
       hold_id = $4
 WHERE id = $1 AND status = 'created' AND (expires_at IS NULL OR expires_at > $2)
RETURNING *;

-- name: intent_finish
-- Moves an intent from status $3 to the terminal status $2; nothing when it is no longer in $3.
UPDATE intent
   SET status = $2, version = version + 1, finished_at = $4, updated_at = $4, failure_reason = $5
 WHERE id = $1 AND status = $3
RETURNING *;

-- name: intent_list
-- Newest first; $1 service (NULL: every service, admin only), $2 status, $3 channel, $4 account,
-- $5 cursor (ids below it), $6 limit. A service's intents are found through intent_service_idx, keyed
-- by the hash of the service id (migration 0305) and ascending by id, scanned backward (0354).
SELECT *
  FROM intent
 WHERE ($1::text IS NULL OR (hashtext(service_id) = hashtext($1) AND service_id = $1))
   AND ($2::text IS NULL OR status = $2)
   AND ($3::text IS NULL OR channel = $3)
   AND ($4::uuid IS NULL OR payer_account_id = $4 OR payee_account_id = $4)
   AND ($5::uuid IS NULL OR id < $5)
 ORDER BY id DESC
 LIMIT $6;

-- name: intent_daily_volume
-- What payer $1 committed on channel $2 since $3 (intents that did not fail, cancel or expire).
SELECT coalesce(sum(amount), 0)::bigint
  FROM intent
 WHERE payer_account_id = $1 AND channel = $2 AND created_at >= $3
   AND status IN ('created', 'confirmed', 'requires_capture', 'settled');

-- name: intent_confirmed_batch
-- Confirmed intents settled by the outbox (not the payouts, channels $4, awaiting a PSP), oldest
-- deadline first, after cursor $1 (a deadline and id pair), at most $3. Found through intent_due
-- (migration 0306).
SELECT d.intent_id AS id, d.due_at AS settle_deadline_at
  FROM intent_due AS d
  JOIN intent AS i ON i.id = d.intent_id
 WHERE d.status = 'confirmed' AND (d.due_at, d.intent_id) > ($1, $2)
   AND i.status = 'confirmed' AND i.channel <> ALL ($4::text[])
 ORDER BY d.due_at, d.intent_id
 LIMIT $3;

-- name: intent_history
-- Intents where account $1 pays or is paid, newest first, below cursor $2, at most $3.
SELECT *
  FROM intent
 WHERE (payer_account_id = $1 OR payee_account_id = $1 OR fee_account_id = $1)
   AND ($2::uuid IS NULL OR id < $2)
 ORDER BY id DESC
 LIMIT $3;

-- name: intent_notify
SELECT pg_notify($1, $2);

-- name: intent_finish_settled
-- Ends a confirmed (or uncaptured) intent (status $3 -> $2 at $4, reason $5) and writes its settlement
-- row (outcome $6, by $7) in one statement; nothing when the intent is no longer in $3. A capture
-- names what it posted ($8 of the amount, $9 of the fee), which the intent records.
WITH finished AS (
    UPDATE intent
       SET status = $2, version = version + 1, finished_at = $4, updated_at = $4, failure_reason = $5,
           amount_captured = $8, fee_captured = $9
     WHERE id = $1 AND status = $3
    RETURNING *
), recorded AS (
    INSERT INTO settlement (intent_id, outcome, settled_by, created_at)
    SELECT id, $6, $7, $4 FROM finished
    RETURNING intent_id
)
SELECT finished.* FROM finished JOIN recorded ON recorded.intent_id = finished.id;

-- name: intent_capture_due
-- Up to $2 manual intents still uncaptured past their capture deadline at $1, locked; rows a capture,
-- a cancel or another sweep holds are skipped (they are being ended).
-- Found through intent_due (migration 0306); the intent's own status is checked again under its lock.
SELECT i.*
  FROM intent_due AS d
  JOIN intent AS i ON i.id = d.intent_id
 WHERE d.status = 'requires_capture' AND d.due_at <= $1 AND i.status = 'requires_capture'
 ORDER BY d.due_at
 LIMIT $2
   FOR UPDATE OF i SKIP LOCKED;

-- name: intent_expire_due
-- Expires up to $2 created invoices whose expires_at passed at $1, in one statement; rows another
-- process is expiring (or confirming) are skipped, so concurrent sweeps never expire one twice.
-- Found through intent_due (migration 0306); the intent's own status is checked again under its lock.
WITH due AS (
    SELECT i.id
      FROM intent_due AS d
      JOIN intent AS i ON i.id = d.intent_id
     WHERE d.status = 'created' AND d.due_at <= $1 AND i.status = 'created'
     ORDER BY d.due_at
     LIMIT $2
       FOR UPDATE OF i SKIP LOCKED
)
UPDATE intent
   SET status = 'expired', version = version + 1, finished_at = $1, updated_at = $1, failure_reason = $3
  FROM due
 WHERE intent.id = due.id
RETURNING intent.*;

-- name: intent_lock_many
-- Locks the intents of $1 in id order (so two groups that share an intent cannot deadlock), for a
-- group settlement (settle_intent.settle_many).
SELECT * FROM intent WHERE id = ANY($1::uuid[]) ORDER BY id FOR UPDATE;

-- name: intent_finish_settled_many
-- Ends confirmed intents $1 in one statement: each goes to status $2[i] with reason $3[i] at $6 and
-- gets its settlement row (outcome $4[i], by $7), and NOTIFY $5[i] is sent on channel $8 (the caller
-- knows each event beforehand, as the rows are locked). Returns the ids ended; an intent no longer
-- confirmed is left alone.
WITH r AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[])
        AS r(id, status, reason, outcome, notice)
), finished AS (
    UPDATE intent
       SET status = r.status, version = intent.version + 1, finished_at = $6, updated_at = $6,
           failure_reason = r.reason
      FROM r
     WHERE intent.id = ANY($1::uuid[]) AND intent.id = r.id AND intent.status = 'confirmed'
    RETURNING intent.id
), recorded AS (
    INSERT INTO settlement (intent_id, outcome, settled_by, created_at)
    SELECT f.id, r.outcome, $7, $6
      FROM finished AS f JOIN r ON r.id = f.id
    RETURNING intent_id
)
SELECT recorded.intent_id AS id, pg_notify($8, r.notice) AS notified
  FROM recorded JOIN r ON r.id = recorded.intent_id;

-- name: intent_confirmed_lock_many
-- Locks those of intents $1 that are still confirmed, in id order. A settlement, a cancel or a
-- deadline failure of one of them either committed before (it is not returned) or waits for us; one
-- that holds an intent now (or another process's reconciler) is handling it: skipped, so a process
-- starting up never waits on a peer's transaction.
SELECT id
  FROM intent
 WHERE id = ANY ($1::uuid[]) AND status = 'confirmed'
 ORDER BY id
   FOR UPDATE SKIP LOCKED;

-- name: intent_set_hold_id
UPDATE intent SET hold_id = $2 WHERE id = $1;
