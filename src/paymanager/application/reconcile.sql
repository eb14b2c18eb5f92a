-- name: intent_confirmed_lock_many
-- Locks those of intents $1 that are still confirmed, in id order (as every batch of the reconciler
-- does, so two reconcilers wait for each other instead of deadlocking). A settlement, a cancel or a
-- deadline failure of one of them either committed before (it is not returned) or waits for us.
SELECT id
  FROM intent
 WHERE id = ANY ($1::uuid[]) AND status = 'confirmed'
 ORDER BY id
   FOR UPDATE;
