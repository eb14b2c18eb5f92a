-- The running jobs indexed by queue first. A globally limited queue counts its running jobs on
-- every claim (job_claim_limited); with the lease alone as the key that count walked the running
-- entries of every queue, live and dead, and a plain queue beside it slowed every claim of the
-- limited one. The lease stays the second column for the rescue of expired leases, which reads
-- the running entries of all queues (a set bounded by the workers' concurrency) and sorts them.
-- It replaces the lease index, so a claim still writes one entry here: plain queues pay nothing more.
CREATE INDEX job_running_idx ON job (queue, lease_expires_at) WHERE state = 'running';
DROP INDEX job_running_lease_idx;
