"""The rescuer: jobs whose lease expired (a crashed or frozen worker) go back to `available`, the
attempt not spent; a job rescued `max_stalled` times already is dead at its next expiry."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from paymanager.db.pool import Conn
from paymanager.jobs._queries import Q

# Rounds per run: a larger backlog of expired leases waits for the next run.
ROUNDS_PER_RUN_MAX = 100


async def rescue_expired(
    conn: Conn, *, max_stalled: int, batch_max: int, now: datetime | None = None
) -> list[asyncpg.Record]:
    """Rescue every job whose lease expired before `now` (the server's clock when None)."""
    rescued: list[asyncpg.Record] = []
    for _ in range(ROUNDS_PER_RUN_MAX):
        rows = await conn.fetch(Q["job_rescue_expired"], now, max_stalled, batch_max)
        rescued.extend(rows)
        if len(rows) < batch_max:
            break
    return rescued
