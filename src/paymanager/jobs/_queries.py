"""The engine's named statements, loaded once."""

from __future__ import annotations

from typing import LiteralString

from paymanager.db.sql import load_queries

Q = load_queries("paymanager.jobs", "jobs.sql")

# The forms of job_claim_batch and job_complete_many for a worker whose completed jobs are kept for
# no time (WorkerOptions.delete_completed): their completion DELETEs the rows instead of updating
# them to `completed`, which writes no new row version and no index entry and leaves nothing to
# prune; results are not kept. Derived from the two statements, so the claim, the lease-token
# fencing and the events have one text (and one set of mutation checks). The worker sends them only
# completions of jobs without a parent: a flow's child is completed, so its parent's trigger counts it.
_COMPLETING = """UPDATE job
       SET state = 'completed', finalized_at = now(), result = r.result,
           lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
      FROM unnest("""
_DELETING = """DELETE FROM job
     USING unnest("""


def _deleting(name: str) -> LiteralString:
    text = Q[name]
    assert text.count(_COMPLETING) == 1, f"{name} no longer completes as the deleting form expects"
    return text.replace(_COMPLETING, _DELETING)


Q["job_claim_batch_deleting"] = _deleting("job_claim_batch")
Q["job_complete_many_deleting"] = _deleting("job_complete_many")

# NOTIFY channels: a queue name on `available` wakes its workers; a job id on `cancel` tells the
# worker running it; lifecycle events are JSON on `events`; a queue name on `queue` says its limits
# changed.
CHANNEL_AVAILABLE = "pm_job_available"
CHANNEL_CANCEL = "pm_job_cancel"
CHANNEL_EVENTS = "pm_job_events"
CHANNEL_QUEUE = "pm_job_queue"
