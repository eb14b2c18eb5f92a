"""Retention: completed and dead (and cancelled) jobs pruned by age and by count, per queue, in
bounded batches so one run never holds long locks or writes a huge transaction."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from paymanager.jobs._store import (
    Executor,
    FinishedQueue,
    completed_kept_oldest,
    finished_queues,
    prune_beyond_count,
    prune_completed,
    prune_older,
)
from paymanager.jobs.options import Retention
from paymanager.jobs.states import JobState

# Batches per rule and run: a backlog larger than this waits for the next run.
BATCHES_PER_RUN_MAX = 100

_FAILED = (JobState.DEAD, JobState.CANCELLED)


async def prune_finished(
    db: Executor, retention_for: Callable[[str], Retention], *, now: datetime | None, batch_max: int
) -> int:
    """Apply each queue's retention to the queues that hold finished jobs; returns the deleted."""
    total = 0
    for queue in await finished_queues(db):
        total += await prune_queue(db, queue, retention_for(queue.name), now=now, batch_max=batch_max)
    return total


async def prune_queue(
    db: Executor, queue: FinishedQueue, retention: Retention, *, now: datetime | None, batch_max: int
) -> int:
    moment = now if now is not None else datetime.now(UTC)
    deleted = await _prune_completed(db, queue, retention, moment=moment, batch_max=batch_max)
    name = queue.name
    if retention.dead_age_ms is not None:
        cutoff = moment - timedelta(milliseconds=retention.dead_age_ms)
        for _ in range(BATCHES_PER_RUN_MAX):
            n = await prune_older(db, queue=name, states=_FAILED, finished_before=cutoff, batch_max=batch_max)
            deleted += n
            if n < batch_max:
                break
    if retention.dead_count is not None:
        for _ in range(BATCHES_PER_RUN_MAX):
            n = await prune_beyond_count(
                db, queue=name, states=_FAILED, keep=retention.dead_count, batch_max=batch_max
            )
            deleted += n
            if n < batch_max:
                break
    return deleted


async def _prune_completed(
    db: Executor, queue: FinishedQueue, retention: Retention, *, moment: datetime, batch_max: int
) -> int:
    """Both rules for completed jobs as one bound, (finish time, id): what finished before it goes,
    so the later of the two bounds (a job either rule lets go goes).
    Completed jobs have no index of their own (migration 0115), so the bound is found once and
    the jobs before it are deleted along the primary key, each batch after the last. Each of those
    reads the table, so a rule the queue's figures show has nothing to prune reads nothing."""
    if not queue.completed:
        return 0
    before: tuple[datetime, int] | None = None  # None: every completed job goes
    if retention.completed_count != 0:
        bounds: list[tuple[datetime, int]] = []
        if retention.completed_age_ms is not None:
            cutoff = moment - timedelta(milliseconds=retention.completed_age_ms)
            if queue.completed_oldest is not None and queue.completed_oldest < cutoff:
                bounds.append((cutoff, 0))
        if retention.completed_count is not None and queue.completed > retention.completed_count:
            kept_oldest = await completed_kept_oldest(db, queue=queue.name, keep=retention.completed_count)
            if kept_oldest is not None:
                bounds.append(kept_oldest)
        if not bounds:
            return 0
        before = max(bounds)
    deleted, after_id = 0, 0
    for _ in range(BATCHES_PER_RUN_MAX):
        n, picked, last_id = await prune_completed(
            db, queue=queue.name, after_id=after_id, before=before, batch_max=batch_max
        )
        deleted += n
        if picked < batch_max or last_id is None:
            break
        after_id = last_id
    return deleted
