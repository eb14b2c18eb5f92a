-- Operability: gauges computed once per scrape interval for the whole cluster, and the audit of
-- every admin action.

-- One row per snapshot of query-computed gauges (`paymanager.metrics`): the scrape that finds it
-- older than METRICS_QUERY_INTERVAL_MS computes it under the row's lock; every other scrape reads it.
CREATE TABLE metric_snapshot (
    name        text PRIMARY KEY,
    computed_at timestamptz NOT NULL DEFAULT '-infinity',
    samples     jsonb NOT NULL DEFAULT '{}'::jsonb
);

-- Every admin action (admin API, dashboard, CLI): who, what, when, and the state before and after.
CREATE TABLE admin_audit (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    -- A service id (API, dashboard) or `cli:<user>@<host>`.
    actor       text NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    -- `api`, `dashboard` or `cli`.
    via         text NOT NULL CHECK (via IN ('api', 'dashboard', 'cli')),
    action      text NOT NULL CHECK (length(action) BETWEEN 1 AND 100),
    target      text NOT NULL CHECK (length(target) <= 500),
    before      jsonb,
    after       jsonb
);
CREATE INDEX admin_audit_at ON admin_audit (at DESC);
CREATE INDEX admin_audit_target ON admin_audit (target, at DESC);
