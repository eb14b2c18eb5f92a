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
