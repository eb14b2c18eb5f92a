-- name: metric_snapshot_claim
-- Claims the computation of snapshot $1 when it is older than $2 ms. The row lock is held until the
-- caller's commit, so a scrape elsewhere waits for the fresh values instead of computing them again.
UPDATE metric_snapshot SET computed_at = now()
 WHERE name = $1 AND computed_at <= now() - make_interval(secs => $2::float8 / 1000)
RETURNING name;

-- name: metric_snapshot_write
UPDATE metric_snapshot SET samples = $2, computed_at = now() WHERE name = $1;

-- name: metric_snapshot_read
SELECT samples, extract(epoch FROM now() - computed_at)::float8 AS age_s FROM metric_snapshot WHERE name = $1;

-- name: metric_snapshot_ensure
INSERT INTO metric_snapshot (name) VALUES ($1) ON CONFLICT (name) DO NOTHING;
