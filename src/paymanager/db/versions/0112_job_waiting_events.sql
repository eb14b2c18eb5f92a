-- The `waiting` event (docs/state_machines.md, "Events"), opted into per queue: a queue whose row
-- has waiting_events publishes one event per job that becomes available by an enqueue or by the
-- promotion of its due time. Off by default, so a queue nobody listens to sends no NOTIFY for it;
-- the enqueue statement reads the flag from the queue's row it already reads for max_depth.
-- Additive: the statements of the previous release neither read nor write the column.
ALTER TABLE job_queue ADD COLUMN waiting_events boolean NOT NULL DEFAULT false;
