-- Foundation: one row per paymanager process, refreshed by its heartbeat.
-- `paymanager health` (the exec probe of headless pods) reads it; the dashboard lists it.
CREATE TABLE process (
    id            text PRIMARY KEY,              -- hostname.pid
    hostname      text NOT NULL,
    pid           integer NOT NULL CHECK (pid > 0),
    roles         text[] NOT NULL,
    version       text NOT NULL,
    started_at    timestamptz NOT NULL,
    heartbeat_at  timestamptz NOT NULL,
    stopped_at    timestamptz,
    CHECK (stopped_at IS NULL OR stopped_at >= started_at)
);
CREATE INDEX process_hostname_idx ON process (hostname) WHERE stopped_at IS NULL;
