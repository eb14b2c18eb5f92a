"""Periodic jobs: each schedule's slot (every N ms, or a cron expression) enqueued once cluster-wide.

The slot is recorded in `job_periodic` in the same transaction as the job, with a conditional
upsert: of several processes seeing the same slot, one writes it and enqueues; the others find the
slot taken. The first sight of a schedule records its slot without enqueuing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from croniter import croniter

from paymanager.db.pool import Pool
from paymanager.jobs import _store as store
from paymanager.jobs.enqueue import enqueue
from paymanager.jobs.errors import EnqueueError
from paymanager.jobs.options import PeriodicJob
from paymanager.logging import get_logger

log = get_logger("paymanager.jobs.periodic")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def current_slot(job: PeriodicJob, now: datetime) -> datetime:
    """The latest slot at or before `now`."""
    if job.interval_ms is not None:
        elapsed_ms = (now - _EPOCH) // timedelta(milliseconds=1)
        return _EPOCH + timedelta(milliseconds=elapsed_ms - elapsed_ms % job.interval_ms)
    assert job.cron is not None
    # croniter's get_prev is strictly before its start; start just after `now` to include `now`.
    slot: datetime = croniter(job.cron, now + timedelta(microseconds=1)).get_prev(datetime)
    return slot


async def enqueue_due(pool: Pool, jobs: tuple[PeriodicJob, ...], now: datetime) -> list[int]:
    """Enqueue every schedule whose current slot is newer than its last; returns the new job ids."""
    created: list[int] = []
    for job in jobs:
        slot = current_slot(job, now)
        try:
            job_id = await _enqueue_slot(pool, job, slot)
        except EnqueueError as exc:
            # Its queue is full, say: the slot's claim rolled back with it, so the next tick tries
            # again; the other schedules go on.
            log.warning("periodic job not enqueued", schedule=job.name, slot=slot.isoformat(), error=str(exc))
            continue
        if job_id is not None:
            created.append(job_id)
    return created


async def _enqueue_slot(pool: Pool, job: PeriodicJob, slot: datetime) -> int | None:
    async with pool.acquire() as conn, conn.transaction():
        if await store.periodic_init(conn, name=job.name, slot=slot):
            return None
        if not await store.periodic_claim_slot(conn, name=job.name, slot=slot):
            return None
        payload = {**job.payload, "slot": slot.isoformat()}
        # One unfinished run per schedule: while a run waits (its queue has no worker right now) or
        # runs long, later slots are skipped rather than piled up behind it.
        result = await enqueue(conn, job.kind, payload, queue=job.queue, unique_key=f"periodic:{job.name}")
        return result.id if result.created else None
