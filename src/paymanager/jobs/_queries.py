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

# The forms of job_claim_batch for a worker with limited queues (a rate, a global concurrency, a
# pause) while it claims plain ones: after the completions, the same statement claims limited queues
# $10, up to $11[i] jobs each, within their limits (job_claim_limited_take, migration 0619), so their
# jobs cost no statement, commit or WAL flush of their own. The function runs after `done` (it reads
# the completed jobs' queues), so the slots the completions freed count for it; it wakes the other
# processes for those queues only for a slot it left free (the batch's `woken` leaves them out), and
# never waits for another process's claim of a queue. One more column, `retry_after_ms`; a row with
# `claimed` false and no id is a limited queue's: it may start nothing for retry_after_ms, or (NULL)
# was being claimed elsewhere and is tried again with the next claim.
_BATCH_ROWS = (
    "c.cancel_requested, c.waited_s\n  FROM claimed AS c",
    "c.cancel_requested, c.waited_s, NULL::bigint AS retry_after_ms\n  FROM claimed AS c",
)
_BATCH_DONE = (
    "SELECT false, d.id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL\n",
    "SELECT false, d.id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL\n",
)
_BATCH_WOKEN = (
    "q.name IN (SELECT d.queue FROM done AS d)\n",
    "q.name IN (SELECT d.queue FROM done AS d) AND q.name <> ALL ($10::text[])\n",
)
_LIMITED_ROWS = """
UNION ALL
SELECT l.claimed, l.id, l.queue, l.kind, l.payload, l.priority, l.attempt, l.max_attempts, l.backoff,
       l.timeout_ms, l.lease_token, l.parent_id, l.cancel_requested, l.waited_s, l.retry_after_ms
  FROM (SELECT coalesce(array_agg(DISTINCT d.queue::text), '{}') AS queues FROM done AS d) AS ended
 CROSS JOIN unnest($10::text[], $11::integer[]) AS w(queue, wanted)
 CROSS JOIN LATERAL job_claim_limited_take(w.queue, w.wanted, $3, $4, false, ended.queues, false) AS l"""


def _with_limited(name: str) -> LiteralString:
    text = Q[name]
    for old, new in (_BATCH_ROWS, _BATCH_DONE, _BATCH_WOKEN):
        assert text.count(old) == 1, f"{name} no longer reads as the limited form expects"
        text = text.replace(old, new)
    return text.rstrip() + _LIMITED_ROWS


Q["job_claim_batch_limited"] = _with_limited("job_claim_batch")
Q["job_claim_batch_limited_deleting"] = _with_limited("job_claim_batch_deleting")

# NOTIFY channels: a queue name on `available` wakes its workers; a job id on `cancel` tells the
# worker running it; lifecycle events are JSON on `events`; a queue name on `queue` says its limits
# changed.
CHANNEL_AVAILABLE = "pm_job_available"
CHANNEL_CANCEL = "pm_job_cancel"
CHANNEL_EVENTS = "pm_job_events"
CHANNEL_QUEUE = "pm_job_queue"
