"""Retention: completed and dead (and cancelled) jobs pruned by age and by count, per queue, in
bounded batches so one run never holds long locks or writes a huge transaction."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from paymanager.jobs._store import Executor, prune_beyond_count, prune_older
from paymanager.jobs.options import Retention
from paymanager.jobs.states import JobState

# Batches per rule and run: a backlog larger than this waits for the next run.
BATCHES_PER_RUN_MAX = 100

_COMPLETED = (JobState.COMPLETED,)
_FAILED = (JobState.DEAD, JobState.CANCELLED)


async def prune_queue(
    db: Executor, queue: str, retention: Retention, *, now: datetime | None, batch_max: int
) -> int:
    moment = now if now is not None else datetime.now(UTC)
    deleted = 0
    rules: list[tuple[tuple[JobState, ...], int | None, int | None]] = [
        (_COMPLETED, retention.completed_age_ms, retention.completed_count),
        (_FAILED, retention.dead_age_ms, retention.dead_count),
    ]
    for states, age_ms, count in rules:
        if age_ms is not None:
            cutoff = moment - timedelta(milliseconds=age_ms)
            for _ in range(BATCHES_PER_RUN_MAX):
                n = await prune_older(
                    db, queue=queue, states=states, finished_before=cutoff, batch_max=batch_max
                )
                deleted += n
                if n < batch_max:
                    break
        if count is not None:
            for _ in range(BATCHES_PER_RUN_MAX):
                n = await prune_beyond_count(db, queue=queue, states=states, keep=count, batch_max=batch_max)
                deleted += n
                if n < batch_max:
                    break
    return deleted
