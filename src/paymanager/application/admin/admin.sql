-- name: audit_insert
-- One admin action: who ($1, through $2), what ($3 on $4), the state before ($5) and after ($6).
INSERT INTO admin_audit (actor, via, action, target, before, after)
VALUES ($1, $2, $3, $4, $5, $6)
RETURNING id, at, actor, via, action, target, before, after;

-- name: audit_list
-- The audit newest first, optionally of one target ($1) or one action ($2); keyset by id ($3).
SELECT id, at, actor, via, action, target, before, after
  FROM admin_audit
 WHERE ($1::text IS NULL OR target = $1)
   AND ($2::text IS NULL OR action = $2)
   AND ($3::bigint IS NULL OR id < $3)
 ORDER BY id DESC
 LIMIT $4;

-- name: intent_search
-- Intents newest first, filtered by the non-NULL arguments: id $1, service $2, status $3, channel $4,
-- an account on either side $5, created at or after $6 and before $7; keyset by (created_at, id).
SELECT id, service_id, channel, status, amount, fee, currency, payer_account_id, payee_account_id,
       failure_reason, created_at, updated_at, finished_at
  FROM intent
 WHERE ($1::uuid IS NULL OR id = $1)
   AND ($2::text IS NULL OR service_id = $2)
   AND ($3::text IS NULL OR status = $3)
   AND ($4::text IS NULL OR channel = $4)
   AND ($5::uuid IS NULL OR payer_account_id = $5 OR payee_account_id = $5)
   AND ($6::timestamptz IS NULL OR created_at >= $6)
   AND ($7::timestamptz IS NULL OR created_at < $7)
 ORDER BY created_at DESC, id DESC
 LIMIT $8;

-- name: intent_count_by_channel_status
SELECT channel, status, count(*)::float8 AS n FROM intent GROUP BY channel, status ORDER BY channel, status;

-- name: service_disable
-- Disables a service (its requests are refused within SERVICE_CACHE_TTL_MS); returns the row before.
UPDATE service AS s SET disabled_at = coalesce(s.disabled_at, now())
  FROM (SELECT id, disabled_at FROM service WHERE id = $1 FOR UPDATE) AS old
 WHERE s.id = old.id
RETURNING s.id, s.name, old.disabled_at AS disabled_before, s.disabled_at;

-- name: service_rotate_secret
-- Replaces a service's sealed secret; returns nothing for no such service.
UPDATE service SET secret_ciphertext = $2, secret_key_id = $3 WHERE id = $1 RETURNING id, name;

-- name: snapshot_fact_write
-- A fact recorded for the query gauges (the last ledger verification).
INSERT INTO metric_snapshot (name, computed_at, samples) VALUES ($1, now(), $2)
ON CONFLICT (name) DO UPDATE SET computed_at = now(), samples = EXCLUDED.samples;

-- name: snapshot_fact_read
SELECT samples, extract(epoch FROM computed_at)::float8 AS at_s FROM metric_snapshot WHERE name = $1;
