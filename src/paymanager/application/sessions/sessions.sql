-- name: session_insert
INSERT INTO checkout_session (id, service_id, merchant_account_id, amount, fee, currency, metadata,
                              created_at, updated_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9)
RETURNING *;

-- name: leg_insert_many
INSERT INTO checkout_session_leg (id, session_id, position, kind, amount, instrument, updated_at)
SELECT id, $1, position, kind, amount, instrument, $2
  FROM unnest($3::uuid[], $4::smallint[], $5::text[], $6::bigint[], $7::text[])
       AS t(id, position, kind, amount, instrument)
RETURNING *;

-- name: session_get
SELECT * FROM checkout_session WHERE id = $1;

-- name: session_lock
-- Serialises every change of one session and its legs (confirm, cancel, actions, cleanup) on its row.
SELECT * FROM checkout_session WHERE id = $1 FOR UPDATE;

-- name: session_of_leg
-- The session of leg $1, not locked: a check made again under the lock before anything is written.
SELECT s.* FROM checkout_session s JOIN checkout_session_leg l ON l.session_id = s.id WHERE l.id = $1;

-- name: session_lock_of_leg
-- The session of leg $1, locked: an action knows its leg, and changes it under its session's lock.
SELECT s.* FROM checkout_session s JOIN checkout_session_leg l ON l.session_id = s.id
 WHERE l.id = $1
   FOR UPDATE OF s;

-- name: session_lock_of_legs
-- Locks the sessions of legs $1 in id order: a group of actions handled in one transaction takes
-- its sessions' locks up front in the order every group uses, so two groups cannot deadlock.
SELECT s.* FROM checkout_session s
 WHERE s.id IN (SELECT session_id FROM checkout_session_leg WHERE id = ANY ($1::uuid[]))
 ORDER BY s.id
   FOR UPDATE OF s;

-- name: session_legs_of_legs
-- The sessions of legs $1 and all their legs, not locked (a check made again under the lock before
-- anything is written), in one statement: a row per leg, the session's columns beside the leg's
-- (named leg_*), ordered by session id then position. Not for a locked read: a statement that waited
-- for a session's lock would see that session's legs as they were before the wait.
SELECT s.*,
       l.id AS leg_id, l.session_id AS leg_session_id, l.position AS leg_position,
       l.kind AS leg_kind, l.status AS leg_status, l.amount AS leg_amount,
       l.instrument AS leg_instrument, l.attempted_at AS leg_attempted_at,
       l.provider_ref AS leg_provider_ref, l.failure_reason AS leg_failure_reason,
       l.updated_at AS leg_updated_at
  FROM checkout_session s JOIN checkout_session_leg l ON l.session_id = s.id
 WHERE s.id IN (SELECT session_id FROM checkout_session_leg WHERE id = ANY ($1::uuid[]))
 ORDER BY s.id, l.position;

-- name: legs_of_session
SELECT * FROM checkout_session_leg WHERE session_id = $1 ORDER BY position;

-- name: legs_of_sessions
SELECT * FROM checkout_session_leg WHERE session_id = ANY ($1::uuid[]) ORDER BY session_id, position;

-- name: leg_mark_attempted_many
-- `leg_mark_attempted` for legs $1 in one statement (a group's write-ahead).
UPDATE checkout_session_leg SET attempted_at = $2, updated_at = $2
 WHERE id = ANY ($1::uuid[]) AND attempted_at IS NULL;

-- name: session_set_status
-- Moves session $1 from $3 to $2 at $4; nothing when it is no longer in $3.
UPDATE checkout_session
   SET status = $2, version = version + 1, updated_at = $4, failure_reason = coalesce($5, failure_reason),
       confirmed_at = CASE WHEN $2 = 'processing' THEN $4 ELSE confirmed_at END,
       finished_at = CASE WHEN $2 IN ('completed', 'failed', 'cancelled', 'expired') THEN $4 END
 WHERE id = $1 AND status = $3
RETURNING *;

-- name: session_lock_due
-- Active sessions past their expiry at $1, oldest first, at most $2, locked; those another
-- transaction holds (a confirm, an action, another cleanup) are skipped, and taken by a later tick.
SELECT * FROM checkout_session
 WHERE status IN ('open', 'processing') AND expires_at <= $1
 ORDER BY expires_at
 LIMIT $2
   FOR UPDATE SKIP LOCKED;

-- name: leg_set_status
-- Moves leg $1 from $3 to $2 at $4; nothing when it is no longer in $3.
UPDATE checkout_session_leg
   SET status = $2, updated_at = $4, provider_ref = coalesce($5, provider_ref),
       failure_reason = coalesce($6, failure_reason)
 WHERE id = $1 AND status = $3
RETURNING *;

-- name: leg_mark_attempted
-- Written before the first call to the provider for leg $1 (write-ahead); a no-op after that.
UPDATE checkout_session_leg SET attempted_at = $2, updated_at = $2
 WHERE id = $1 AND attempted_at IS NULL;

-- name: session_event_insert
-- Once per (session, type): a second end of the same kind (it cannot happen) is ignored, not doubled.
INSERT INTO checkout_session_event (id, session_id, service_id, type, payload, created_at)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (session_id, type) DO NOTHING
RETURNING id;

-- name: session_events_of_session
SELECT * FROM checkout_session_event WHERE session_id = $1 ORDER BY created_at, id;
