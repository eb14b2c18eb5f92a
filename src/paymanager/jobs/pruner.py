"""Retention: completed and dead (and cancelled) jobs pruned by age and by count, per queue, in
bounded batches so one run never holds long locks or writes a huge transaction."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from paymanager.db.pool import Conn
from paymanager.jobs._queries import Q
from paymanager.jobs.options import Retention

# Batches per rule and run: a backlog larger than this waits for the next run.
BATCHES_PER_RUN_MAX = 100

_COMPLETED = ["completed"]
_FAILED = ["dead", "cancelled"]


async def prune_queue(
    conn: Conn, queue: str, retention: Retention, *, now: datetime | None, batch_max: int
) -> int:
    moment = now if now is not None else datetime.now(UTC)
    deleted = 0
    rules: list[tuple[list[str], int | None, int | None]] = [
        (_COMPLETED, retention.completed_age_ms, retention.completed_count),
        (_FAILED, retention.dead_age_ms, retention.dead_count),
    ]
    for states, age_ms, count in rules:
        if age_ms is not None:
            cutoff = moment - timedelta(milliseconds=age_ms)
            deleted += await _repeat(conn, Q["job_prune_older"], queue, states, cutoff, batch_max)
        if count is not None:
            deleted += await _repeat(conn, Q["job_prune_beyond_count"], queue, states, count, batch_max)
    return deleted


async def _repeat(
    conn: Conn, statement: str, queue: str, states: list[str], bound: object, batch: int
) -> int:
    total = 0
    for _ in range(BATCHES_PER_RUN_MAX):
        n = int(await conn.fetchval(statement, queue, states, bound, batch))
        total += n
        if n < batch:
            break
    return total
