"""The rescuer: jobs whose lease expired (a crashed or frozen worker) go back to `available`, the
attempt not spent; a job rescued `max_stalled` times already is dead at its next expiry."""

from __future__ import annotations

from datetime import datetime

from paymanager.jobs._store import Executor, RescuedJob
from paymanager.jobs._store import rescue_expired as rescue_batch

# Rounds per run: a larger backlog of expired leases waits for the next run.
ROUNDS_PER_RUN_MAX = 100


async def rescue_expired(
    db: Executor, *, max_stalled: int, batch_max: int, now: datetime | None = None
) -> list[RescuedJob]:
    """Rescue every job whose lease expired before `now` (the server's clock when None)."""
    rescued: list[RescuedJob] = []
    for _ in range(ROUNDS_PER_RUN_MAX):
        rows = await rescue_batch(db, now=now, max_stalled=max_stalled, batch_max=batch_max)
        rescued.extend(rows)
        if len(rows) < batch_max:
            break
    return rescued
